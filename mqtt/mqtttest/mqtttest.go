// Package mqtttest starts real Tidemark brokers on real engines for tests:
// in this process (Start) or in a child process that a test can kill with
// SIGKILL (see conformance for the child side).
package mqtttest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/internal/freeport"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/table"
)

// TB is the part of testing.TB the helpers use (conformance.T has it);
// the package does not import testing, so the tidemark binary can run the
// conformance suite without linking it.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
	TempDir() string
}

// Server is a broker over an engine in a data directory, listening on a
// loopback port. Stop and Start keep the directory and the port, so a test
// can restart the broker and reconnect to the same address.
type Server struct {
	Engine string
	Dir    string
	Params map[string]string
	// Sync is the engine's durability mode; engine.SyncAlways (the zero
	// value) unless set before Start.
	Sync engine.SyncMode
	Opts mqtt.Options
	Addr string
	// Wrap, when set, is given the engine at every Start and returns the
	// one the broker uses: a test looks at what the broker commits. The
	// wrapper passes every call on to the engine it was given; what the
	// engine offers beyond engine.Engine (engine.CommitLimit, for one)
	// the broker sees only if the wrapper has it too.
	Wrap func(engine.Engine) engine.Engine
	// Partitions, when above 1, splits the store over that many engines
	// (mqtt.NewPartitioned), each in a directory of its own under Dir:
	// p0, p1, ... Set before the first Start.
	Partitions int

	es     []engine.Engine
	db     *table.DB
	parts  *table.Partitions
	b      *mqtt.Broker
	ln     net.Listener
	served chan error
}

// Start starts a broker on engine name in a fresh directory. It is stopped
// when the test ends.
func Start(t TB, name string, params map[string]string, opts mqtt.Options) *Server {
	t.Helper()
	return start(t, &Server{Engine: name, Dir: t.TempDir(), Params: params, Opts: opts})
}

// StartWrapped is Start with Server.Wrap set to wrap.
func StartWrapped(t TB, name string, wrap func(engine.Engine) engine.Engine, opts mqtt.Options) *Server {
	t.Helper()
	return start(t, &Server{Engine: name, Dir: t.TempDir(), Opts: opts, Wrap: wrap})
}

// StartSync is Start with the engine's durability mode sync.
func StartSync(t TB, name string, sync engine.SyncMode, opts mqtt.Options) *Server {
	t.Helper()
	return start(t, &Server{Engine: name, Dir: t.TempDir(), Sync: sync, Opts: opts})
}

func start(t TB, s *Server) *Server {
	t.Helper()
	if err := s.Start(); err != nil {
		t.Fatalf("start broker on %s: %v", s.Engine, err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// StartPartitioned is Start with the store split over n partitions.
func StartPartitioned(t TB, name string, n int, opts mqtt.Options) *Server {
	t.Helper()
	return start(t, &Server{Engine: name, Dir: t.TempDir(), Opts: opts, Partitions: n})
}

// StartServer starts s, set up by the caller (Dir among the rest); it is
// stopped when the test ends.
func StartServer(t TB, s *Server) *Server {
	t.Helper()
	return start(t, s)
}

// PartitionDir is the directory of partition i of a store split over n
// partitions in dir (dir itself when n is 1).
func PartitionDir(dir string, i, n int) string {
	if n <= 1 {
		return dir
	}
	return filepath.Join(dir, fmt.Sprintf("p%d", i))
}

// openEngines opens the server's engine, or one per partition.
func (s *Server) openEngines(ctx context.Context) ([]engine.Engine, error) {
	if s.Partitions <= 1 {
		e, err := engine.Open(ctx, s.Engine, engine.Options{Dir: s.Dir, Params: s.Params, Sync: s.Sync})
		if err != nil {
			return nil, err
		}
		return []engine.Engine{e}, nil
	}
	var es []engine.Engine
	for i := range s.Partitions {
		e, err := engine.Open(ctx, s.Engine, engine.Options{Dir: PartitionDir(s.Dir, i, s.Partitions), Params: s.Params, Sync: s.Sync})
		if err != nil {
			closeAll(es)
			return nil, fmt.Errorf("partition %d: %w", i, err)
		}
		es = append(es, e)
	}
	return es, nil
}

func closeAll(es []engine.Engine) {
	for _, e := range es {
		_ = e.Close()
	}
}

// Start (re)starts the broker on the server's directory and address.
func (s *Server) Start() error {
	ctx := context.Background()
	es, err := s.openEngines(ctx)
	if err != nil {
		return err
	}
	if s.Wrap != nil {
		for i := range es {
			es[i] = s.Wrap(es[i])
		}
	}
	parts, err := table.OpenPartitions(ctx, es, table.Options{})
	if err != nil {
		closeAll(es)
		return err
	}
	db := parts.DB(0)
	b, err := mqtt.NewPartitioned(parts, s.Opts)
	if err != nil {
		parts.Close()
		closeAll(es)
		return err
	}
	addr := s.Addr
	if addr == "" {
		// Below the ephemeral range, so that a restart on the same
		// address never finds a client's local port on it.
		if addr, err = freeport.Addr(); err != nil {
			b.Close()
			parts.Close()
			closeAll(es)
			return err
		}
	}
	var ln net.Listener
	// Listened to as `tidemark serve` does, so what a test or benchmark
	// measures per connection is what the broker pays there.
	lc := net.ListenConfig{KeepAlive: -1, Control: mqtt.KeepAliveControl}
	for i := 0; ; i++ {
		ln, err = lc.Listen(context.Background(), "tcp", addr)
		if err == nil || i > 50 {
			break
		}
		time.Sleep(100 * time.Millisecond) // the old listener's port is being released
	}
	if err != nil {
		b.Close()
		parts.Close()
		closeAll(es)
		return err
	}
	s.Addr = ln.Addr().String()
	s.es, s.db, s.parts, s.b, s.ln = es, db, parts, b, ln
	s.served = make(chan error, 1)
	go func() { s.served <- b.Serve(ln) }()
	return nil
}

// Stop stops the broker cleanly and closes its engine.
func (s *Server) Stop() error {
	if s.b == nil {
		return nil
	}
	err := s.b.Close()
	if serr := <-s.served; serr != nil && !errors.Is(serr, net.ErrClosed) {
		err = errors.Join(err, serr)
	}
	err = errors.Join(err, s.parts.Close())
	for _, e := range s.es {
		err = errors.Join(err, e.Close())
	}
	s.b, s.db, s.parts, s.es = nil, nil, nil, nil
	return err
}

// Restart stops and starts the broker.
func (s *Server) Restart() error {
	if err := s.Stop(); err != nil {
		return err
	}
	return s.Start()
}

// Broker returns the running broker.
func (s *Server) Broker() *mqtt.Broker { return s.b }

// DB returns the running broker's tables (its first partition's, when
// the store is split).
func (s *Server) DB() *table.DB { return s.db }

// Parts returns the running broker's partitions (one, unless the store
// is split).
func (s *Server) Parts() *table.Partitions { return s.parts }
