package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// nodeIDFile is the file in the data directory that keeps a node's
// generated id, so a node restarted on the same data directory is the
// same node to the others: it recovers the sessions it left online, and
// takes over from the others as one of them.
const nodeIDFile = "node-id"

var nodeIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// checkNodeID reports a node id that is not 1-64 letters, digits, '.',
// '_' or '-' starting with a letter or digit.
func checkNodeID(id, source string) error {
	if !nodeIDPattern.MatchString(id) {
		return fmt.Errorf("%s %q: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit, unique among the nodes sharing the stream", source, id)
	}
	return nil
}

// sharedStore reports whether the engine flags name a store that other
// Tidemark nodes can share: a JetStream stream on a NATS server or
// cluster (--nats-url). Only such a store needs node ids.
func (f *engineFlags) sharedStore() bool {
	return f.name == "jetstream" && f.natsURL != ""
}

// nodeID returns the node id of `serve`: --node-id when given; else, on a
// shared store, the id kept in the data directory, generated and written
// there on the first start; else "" (a broker alone on its store, which
// needs none).
func (f *serveFlags) nodeID() (string, error) {
	if f.nodeIDFlag != "" {
		return f.nodeIDFlag, checkNodeID(f.nodeIDFlag, "--node-id")
	}
	if !f.sharedStore() {
		return "", nil
	}
	return loadNodeID(f.data)
}

// loadNodeID reads the node id kept in dir, or generates one (the host
// name and random hex) and keeps it there, creating dir if need be.
func loadNodeID(dir string) (string, error) {
	path := filepath.Join(dir, nodeIDFile)
	raw, err := os.ReadFile(path)
	switch {
	case err == nil:
		id := strings.TrimSpace(string(raw))
		if err := checkNodeID(id, path); err != nil {
			return "", fmt.Errorf("%w (fix or remove the file, or give --node-id)", err)
		}
		return id, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("node id: %w (give --node-id, or make %s readable)", err, path)
	}
	id := newNodeID()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("node id: %w (give --node-id, or a writable --data)", err)
	}
	// Written whole or not at all: a crash leaves no half id behind.
	tmp, err := os.CreateTemp(dir, nodeIDFile+".*")
	if err != nil {
		return "", fmt.Errorf("node id: %w (give --node-id, or a writable --data)", err)
	}
	_, err = tmp.WriteString(id + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("node id: keep it in %s: %w (give --node-id, or a writable --data)", path, err)
	}
	return id, nil
}

// newNodeID returns the host name (as far as it fits a node id) and 8
// random hex digits: readable in logs and session listings, and unique
// even for nodes started from copies of one machine image.
func newNodeID() string {
	var r [4]byte
	_, _ = rand.Read(r[:])
	suffix := hex.EncodeToString(r[:])
	host, _ := os.Hostname()
	host = strings.Map(func(c rune) rune {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
			return c
		}
		return '-'
	}, host)
	host = strings.Trim(host, "-_")
	if len(host) > 40 {
		host = host[:40]
	}
	if host == "" {
		return "node-" + suffix
	}
	return host + "-" + suffix
}
