package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/spf13/pflag"
	"github.com/tidemark-io/tidemark/engine"
)

// partitionFlags split the broker's store over several engines
// (mqtt.NewPartitioned), so that no one log orders every commit: on
// JetStream, streams led by different servers of a cluster.
type partitionFlags struct {
	partitions int
	leaders    []string
}

// maxPartitions is the most partitions a broker's store is split over.
const maxPartitions = 16

func (f *partitionFlags) register(fs *pflag.FlagSet) {
	fs.IntVar(&f.partitions, "partitions", 1, "split the store over this many engines, fixed when the store is created (1-16): jetstream streams <stream>, <stream>-1, ...; the other engines <data>/p0, <data>/p1, ... A client's session and the messages it publishes go to its client id's partition (docs/cluster.md)")
	fs.StringSliceVar(&f.leaders, "partition-leaders", nil, "jetstream with --nats-url and --replicas 2 or more: the NATS server (server_name) to lead each partition's stream, in partition order and repeated as needed, e.g. n1,n2,n3")
}

func (f *partitionFlags) validate(engineName string) error {
	switch {
	case f.partitions < 1 || f.partitions > maxPartitions:
		return fmt.Errorf("--partitions %d: allowed 1 to %d", f.partitions, maxPartitions)
	case len(f.leaders) > 0 && engineName != "jetstream":
		return fmt.Errorf("--partition-leaders applies only to --engine jetstream (got --engine %s)", engineName)
	}
	for _, l := range f.leaders {
		if l == "" {
			return fmt.Errorf("--partition-leaders %q: a server name is empty", strings.Join(f.leaders, ","))
		}
	}
	return nil
}

// partitionOptions returns the engine options of partition i of n.
// JetStream: partition 0 is the store of one partition (same stream,
// same directory), partition i another stream, <stream>-i, with a
// directory of its own under the data directory for its index; an
// embedded server is partition 0's, which the others connect to. The
// other engines: a directory per partition, <data>/p<i>, when n > 1.
func (f *partitionFlags) partitionOptions(engineName string, opts engine.Options, i int, serverURL string) engine.Options {
	n := f.partitions
	o := opts
	o.Params = maps.Clone(opts.Params)
	if o.Params == nil {
		o.Params = map[string]string{}
	}
	if engineName != "jetstream" {
		if n > 1 {
			o.Dir = filepath.Join(opts.Dir, "p"+strconv.Itoa(i))
		}
		return o
	}
	if len(f.leaders) > 0 {
		o.Params["leader"] = f.leaders[i%len(f.leaders)]
	}
	if i == 0 {
		return o
	}
	base := o.Params["stream"]
	if base == "" {
		base = "tidemark"
	}
	o.Params["stream"] = base + "-" + strconv.Itoa(i)
	o.Dir = filepath.Join(opts.Dir, "p"+strconv.Itoa(i))
	if o.Params["url"] == "" {
		o.Params["url"] = serverURL
	}
	return o
}

// partitionDir matches the directories of a split store's partitions.
var partitionDir = regexp.MustCompile(`^p[0-9]+$`)

// checkLayout refuses to open a data directory of the embedded engines
// with another partition count than its store has: the count is fixed
// when the store is created, and an engine opened on the wrong
// directory would start an empty store beside the real one.
func checkLayout(engineName, data string, n int) error {
	if engineName == "jetstream" {
		return nil // each stream records its partition (table.OpenPartitions checks)
	}
	entries, err := os.ReadDir(data)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("--data %s: %w", data, err)
	}
	var parts, other []string
	for _, e := range entries {
		if e.IsDir() && partitionDir.MatchString(e.Name()) {
			parts = append(parts, e.Name())
		} else if e.Name() != "node-id" {
			other = append(other, e.Name())
		}
	}
	switch {
	case n == 1 && len(parts) > 0:
		return fmt.Errorf("--data %s holds a store split over %d partitions (%s): run with --partitions %d; the count is fixed when the store is created",
			data, len(parts), strings.Join(parts, ", "), len(parts))
	case n > 1 && len(other) > 0:
		return fmt.Errorf("--data %s holds a store of one partition (%s, ...): run with --partitions 1, or give --partitions %d a new --data directory; the count is fixed when the store is created",
			data, other[0], n)
	}
	return nil
}

// openPartitions opens the engines of the store, one per partition,
// each as open would (closing those it opened when one fails): the
// first, then the others at once, so that a stream waiting for its
// leader's election does not hold up the others'.
func (f *partitionFlags) openPartitions(ctx context.Context, engineName string, opts engine.Options,
	open func(context.Context, string, engine.Options) (engine.Engine, error)) ([]engine.Engine, error) {
	if err := checkLayout(engineName, opts.Dir, f.partitions); err != nil {
		return nil, err
	}
	n := f.partitions
	es := make([]engine.Engine, n)
	errs := make([]error, n)
	openOne := func(i int, serverURL string) {
		e, err := open(ctx, engineName, f.partitionOptions(engineName, opts, i, serverURL))
		if err != nil && n > 1 {
			err = fmt.Errorf("partition %d of %d: %w", i, n, err)
		}
		es[i], errs[i] = e, err
	}
	// An embedded server is the first partition's, which the others
	// connect to.
	openOne(0, "")
	if errs[0] == nil {
		serverURL := ""
		if sh, ok := es[0].(interface{ ClientURL() string }); ok {
			serverURL = sh.ClientURL()
		}
		var wg sync.WaitGroup
		for i := 1; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				openOne(i, serverURL)
			}()
		}
		wg.Wait()
	}
	if err := errors.Join(errs...); err != nil {
		for _, e := range es {
			if e != nil {
				_ = e.Close()
			}
		}
		return nil, err
	}
	return es, nil
}
