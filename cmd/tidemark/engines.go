package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/tidemark-io/tidemark/engine"

	// The engines compiled into the binary register themselves.
	_ "github.com/tidemark-io/tidemark/engine/badger"
	_ "github.com/tidemark-io/tidemark/engine/jetstream"
	_ "github.com/tidemark-io/tidemark/engine/lmdb"
	_ "github.com/tidemark-io/tidemark/engine/pebble"
)

// engineFlags are the engine options every command that opens an engine
// takes, in one place.
type engineFlags struct {
	name         string
	data         string
	sync         string
	syncInterval time.Duration
	syncDefer    time.Duration
	natsURL      string
	natsCreds    string
	natsNkey     string
	natsTLSCA    string
	replicas     int
	params       []string
}

func (f *engineFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.name, "engine", "pebble", "storage engine: "+strings.Join(engine.Drivers(), ", ")+"; unset, the one that wrote the data directory, or else pebble")
	fs.StringVar(&f.data, "data", "./data", "data directory")
	fs.StringVar(&f.sync, "sync", "always", "durability: always, interval or none")
	fs.DurationVar(&f.syncInterval, "sync-interval", engine.DefaultSyncInterval, "sync period for --sync interval")
	fs.DurationVar(&f.syncDefer, "sync-defer", engine.DefaultDeferWindow, syncDeferUsage)
	fs.StringVar(&f.natsURL, "nats-url", "", "jetstream engine: NATS server or cluster URL; empty starts an embedded server")
	fs.StringVar(&f.natsCreds, "nats-creds", "", "jetstream engine with --nats-url: NATS credentials file (user JWT and seed)")
	fs.StringVar(&f.natsNkey, "nats-nkey", "", "jetstream engine with --nats-url: file with the user nkey seed")
	fs.StringVar(&f.natsTLSCA, "nats-tls-ca", "", "jetstream engine with --nats-url: PEM CA file the NATS server's certificate must chain to")
	fs.IntVar(&f.replicas, "replicas", 1, "jetstream engine: stream replicas (1, or 3 on a cluster)")
	fs.StringSliceVar(&f.params, "engine-param", nil, "engine-specific parameter name=value (repeatable)")
}

// fromDirectory sets the engine to the one whose store the data
// directory holds, unless --engine (or its variable or config key) named
// one; it reports whether it did.
func (f *engineFlags) fromDirectory(fs *pflag.FlagSet) bool {
	if fs.Changed("engine") || f.natsURL != "" || f.data == "" {
		return false
	}
	dir := f.data
	if st, err := os.Stat(filepath.Join(dir, "p0")); err == nil && st.IsDir() {
		dir = filepath.Join(dir, "p0") // a store split over partitions
	}
	owner, err := engine.DirEngine(dir)
	if err != nil || owner == "" || owner == f.name {
		return false
	}
	// Set through the flag set, so --print-config shows it.
	return fs.Set("engine", owner) == nil
}

// options validates the flags and returns engine options, naming the flag
// and the allowed values on error.
func (f *engineFlags) options() (engine.Options, error) {
	if _, err := engine.Lookup(f.name); err != nil {
		return engine.Options{}, fmt.Errorf("--engine %q: %w", f.name, err)
	}
	mode, err := engine.ParseSyncMode(f.sync)
	if err != nil {
		return engine.Options{}, fmt.Errorf("--sync: %w", err)
	}
	if f.syncInterval <= 0 {
		return engine.Options{}, fmt.Errorf("--sync-interval %v: must be positive", f.syncInterval)
	}
	if err := checkSyncDefer(f.syncDefer); err != nil {
		return engine.Options{}, err
	}
	if f.data == "" {
		return engine.Options{}, fmt.Errorf("--data: a data directory is required")
	}
	params := map[string]string{}
	for _, p := range f.params {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return engine.Options{}, fmt.Errorf("--engine-param %q: want name=value", p)
		}
		params[k] = v
	}
	if f.name == "jetstream" {
		if f.natsURL != "" {
			params["url"] = f.natsURL
		}
		if f.replicas != 1 {
			params["replicas"] = strconv.Itoa(f.replicas)
		}
		secured := false
		for _, p := range []struct{ flag, param, v string }{{"--nats-creds", "creds", f.natsCreds}, {"--nats-nkey", "nkey", f.natsNkey}, {"--nats-tls-ca", "tls_ca", f.natsTLSCA}} {
			if p.v != "" {
				params[p.param], secured = p.v, true
			}
		}
		if secured && f.natsURL == "" {
			return engine.Options{}, fmt.Errorf("--nats-creds, --nats-nkey and --nats-tls-ca apply with --nats-url (the embedded server needs none)")
		}
	} else if f.natsURL != "" || f.replicas != 1 || f.natsCreds != "" || f.natsNkey != "" || f.natsTLSCA != "" {
		return engine.Options{}, fmt.Errorf("--nats-url, --nats-creds, --nats-nkey, --nats-tls-ca and --replicas apply only to --engine jetstream (got --engine %s)", f.name)
	}
	return engine.Options{Dir: f.data, Sync: mode, SyncInterval: f.syncInterval, DeferWindow: deferWindow(f.syncDefer), Params: params}, nil
}

const syncDeferUsage = "with --sync always (jetstream: any --sync): how long a commit of delivery state may wait to share a later commit's fsync (jetstream: its round trip through the server); 0 commits it at once"

func checkSyncDefer(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("--sync-defer %v: must be 0 (no deferral) or positive", d)
	}
	return nil
}

// deferWindow maps --sync-defer to engine.Options.DeferWindow, where
// zero means the default and a negative window none.
func deferWindow(flag time.Duration) time.Duration {
	if flag == 0 {
		return -1
	}
	return flag
}
