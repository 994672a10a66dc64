package mqttbench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/internal/freeport"
)

// TidemarkProcess is Tidemark as a target that runs `<bin> serve` in a
// process of its own, as mosquitto runs: the load generator and the
// broker then share no Go runtime, so neither one's scheduling is charged
// to the other, and the benchmark's own CPU per exchange can be read (see
// Result.ClientMicros). bin must be a tidemark executable with the engine
// compiled in; extra flags, if any, follow the ones opts makes.
func TidemarkProcess(bin, name string, opts engine.Options, extra ...string) (Target, error) {
	if _, err := engine.Lookup(name); err != nil {
		return Target{}, err
	}
	t := Target{Name: "tidemark/" + name, Kind: KindTidemark, Engine: name, Sync: opts.Sync.String(),
		Durability: tidemarkDurability(name, opts)}
	args := append(serveArgs(name, opts), extra...)
	t.start = func(ctx context.Context, dir string, log *slog.Logger) (*instance, error) {
		return startTidemarkProcess(ctx, bin, args, dir, log)
	}
	return t, nil
}

// serveArgs are the `serve` flags for engine name with opts.
func serveArgs(name string, opts engine.Options) []string {
	// No queue limit and no session expiry, as mosquitto is configured
	// (max_queued_messages 0): the benchmark measures delivery, not
	// what the limits drop.
	args := []string{"serve", "--engine", name, "--sync", opts.Sync.String(), "--log-level", "warn",
		"--max-queued", "0", "--session-expiry", "0"}
	if opts.Sync == engine.SyncInterval && opts.SyncInterval > 0 {
		args = append(args, "--sync-interval", opts.SyncInterval.String())
	}
	switch {
	case opts.DeferWindow < 0:
		args = append(args, "--sync-defer", "0s")
	case opts.DeferWindow > 0:
		args = append(args, "--sync-defer", opts.DeferWindow.String())
	}
	for _, k := range slices.Sorted(maps.Keys(opts.Params)) {
		args = append(args, "--engine-param", k+"="+opts.Params[k])
	}
	return args
}

func startTidemarkProcess(ctx context.Context, bin string, args []string, dir string, log *slog.Logger) (*instance, error) {
	var errs []error
	for range 3 {
		port, err := freeport.Port()
		if err != nil {
			return nil, err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		a := append(slices.Clone(args), "--data", filepath.Join(dir, "data"), "--mqtt", addr)
		p, err := startChild("tidemark", bin, a, dir, log, tidemarkLogLine)
		if err != nil {
			return nil, err
		}
		err = p.waitReady(ctx, addr)
		if err == nil {
			return &instance{addr: addr, stop: p.stop, external: true, pid: p.Pid()}, nil
		}
		if !p.exitedEarly() {
			return nil, errors.Join(err, p.stop())
		}
		errs = append(errs, err)
		if !strings.Contains(p.logTail(), "in use") || ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("tidemark serve: %w", errors.Join(errs...))
}

// tidemarkLogLine passes the child's warnings and errors on (it logs at
// warn level and above only).
func tidemarkLogLine(log *slog.Logger, line string) {
	if strings.TrimSpace(line) != "" {
		log.Warn("tidemark serve: " + line)
	}
}
