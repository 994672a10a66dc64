package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/tidemark-io/tidemark/bench/commitbench"
	"github.com/tidemark-io/tidemark/bench/mqttbench"
	"github.com/tidemark-io/tidemark/engine"
)

// mqttBenchFlags are the flags of the MQTT benchmark.
type mqttBenchFlags struct {
	engines      []string
	peers        []string
	syncs        []string
	syncInterval time.Duration
	syncDefer    time.Duration
	duration     time.Duration
	rounds       int
	quick        bool
	loads        []string
	jsonOut      string
	chart        string
	dir          string
	inProcess    bool
	serveFlags   []string
}

// mqttBenchCmd is the MQTT benchmark under the name use ("bench" or "mqtt").
func mqttBenchCmd(use string) *cobra.Command {
	var f mqttBenchFlags
	cmd := &cobra.Command{
		Use:   use,
		Short: "Drive the same MQTT load at Tidemark on each engine, nats-server, mochi-mqtt and optionally mosquitto, and compare",
		Long: `Drives the same MQTT 3.1.1 load (64-byte messages) at Tidemark on each selected engine and,
in the same run, at an embedded nats-server (JetStream file store, MQTT listener), an embedded
mochi-mqtt (Badger storage hook) and, with --peers including mosquitto, a mosquitto process
(persistence off; needs the mosquitto package): QoS 0, 1 and 2 on one connection at windows 1,
16 and 256, and QoS 1 and 2 over 50 connections at window 16. A subscriber checks every point for
lost, duplicated and reordered messages. Prints msgs/s, p50/p99 acknowledgement latency and the
ratios to each peer that ran, and what each side fsyncs. Everything listens on 127.0.0.1 only;
each point starts its broker afresh and stops it; Tidemark runs as ` + "`tidemark serve`" + ` in a process of its own
(see --in-process), so the load generator's CPU per exchange, measured while it drives mosquitto, is printed. Rates and latencies leave out each point's
first fifth of --duration (sent on top of it), and each load of 50 connections starts with an
unreported one-second point: both are warm-up, and their messages are checked all the same. Exits non-zero if any point
failed or lost, duplicated or reordered a message.`,
		Example: `  tidemark bench
  tidemark bench mqtt --engines pebble --sync always,none --duration 2s --chart curves.svg
  tidemark bench --engines jetstream --sync interval --peers nats
  tidemark bench --engines pebble --sync none --peers nats,mochi,mosquitto
  tidemark bench --quick --duration 200ms --json -
  tidemark bench --engines pebble --peers mosquitto --sync none --loads qos2-w1,qos0-w1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runMQTTBench(cmd, &f) },
	}
	fs := cmd.Flags()
	fs.StringSliceVar(&f.engines, "engines", nil, "Tidemark engines to drive (default: all compiled in: "+strings.Join(engine.Drivers(), ", ")+"); none for peers only")
	fs.StringSliceVar(&f.peers, "peers", mqttbench.DefaultPeers, "peer brokers in the same run: "+strings.Join(mqttbench.Peers, ", ")+
		" (mosquitto runs as a separate process: apt-get install mosquitto), or none")
	fs.StringSliceVar(&f.syncs, "sync", []string{"always"}, "durability for the engines and nats-server (mochi and mosquitto have no such setting): always, interval, none, or several")
	fs.DurationVar(&f.syncInterval, "sync-interval", engine.DefaultSyncInterval, "fsync period for --sync interval")
	fs.DurationVar(&f.syncDefer, "sync-defer", engine.DefaultDeferWindow, syncDeferUsage)
	fs.DurationVar(&f.duration, "duration", 2*time.Second, "measured sending time per point (after a warm-up of a fifth of it)")
	fs.IntVar(&f.rounds, "rounds", 1, "run every point this many times, the targets in turn within each round, and report the median rate with the rounds' spread: on a busy machine, 3 or 5 make ratios worth quoting")
	fs.BoolVar(&f.quick, "quick", false, "fewer points: windows 1 and 16, 10 connections")
	fs.StringSliceVar(&f.loads, "loads", nil, "only these points, by name: qos<0-2>-w<window>[-x<connections>], for example qos2-w1,qos1-w16-x50 (default: all; see --quick)")
	fs.StringVar(&f.jsonOut, "json", "", "write the results as JSON to this file (- for standard output, instead of the table)")
	fs.StringVar(&f.chart, "chart", "", "draw msgs/s against the window per target and QoS to this .svg or .png file")
	fs.StringVar(&f.dir, "dir", "", "directory for the brokers' data (default: a temporary directory)")
	fs.StringArrayVar(&f.serveFlags, "serve-flag", nil, "a further flag for every 'tidemark serve' the benchmark starts (repeatable), e.g. --serve-flag=--metrics=127.0.0.1:9091 to read its profiles during the run")
	fs.BoolVar(&f.inProcess, "in-process", false, "run Tidemark inside the benchmark's process instead of as `tidemark serve` in its own, as mosquitto runs")
	return cmd
}

// targets validates the flags and returns the targets to drive.
func (f *mqttBenchFlags) targets() ([]mqttbench.Target, error) {
	if f.duration <= 0 {
		return nil, fmt.Errorf("--duration %v: must be positive", f.duration)
	}
	if f.rounds < 1 || f.rounds > 99 {
		return nil, fmt.Errorf("--rounds %d: allowed 1 to 99", f.rounds)
	}
	if f.syncInterval <= 0 {
		return nil, fmt.Errorf("--sync-interval %v: must be positive", f.syncInterval)
	}
	if err := checkSyncDefer(f.syncDefer); err != nil {
		return nil, err
	}
	if f.chart != "" && !slices.Contains(mqttbench.ChartFormats, strings.ToLower(filepath.Ext(f.chart))) {
		return nil, fmt.Errorf("--chart %q: the file name must end in %s", f.chart, strings.Join(mqttbench.ChartFormats, " or "))
	}
	engines := f.engines
	if len(engines) == 0 {
		engines = engine.Drivers()
	}
	if slices.Equal(engines, []string{"none"}) {
		engines = nil
	}
	for _, e := range engines {
		if _, err := engine.Lookup(e); err != nil {
			return nil, fmt.Errorf("--engines %q: allowed: %s, or none", e, strings.Join(engine.Drivers(), ", "))
		}
	}
	peers := f.peers
	if slices.Equal(peers, []string{"none"}) {
		peers = nil
	}
	for _, p := range peers {
		if !slices.Contains(mqttbench.Peers, p) {
			return nil, fmt.Errorf("--peers %q: allowed: %s, or none", p, strings.Join(mqttbench.Peers, ", "))
		}
	}
	if len(f.syncs) == 0 {
		return nil, fmt.Errorf("--sync: give at least one of always, interval, none")
	}
	var modes []engine.SyncMode
	for _, s := range f.syncs {
		m, err := engine.ParseSyncMode(s)
		if err != nil || s == "" {
			return nil, fmt.Errorf("--sync %q: allowed: always, interval, none", s)
		}
		if !slices.Contains(modes, m) {
			modes = append(modes, m)
		}
	}
	// Peers with a sync setting run once per mode, after the engines; the
	// others once, at the end.
	self := ""
	if f.inProcess && len(f.serveFlags) > 0 {
		return nil, fmt.Errorf("--serve-flag applies to 'tidemark serve' processes: leave out --in-process to use it")
	}
	if !f.inProcess {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding this executable to run `tidemark serve` (or use --in-process): %w", err)
		}
		self = exe
	}
	var out, once []mqttbench.Target
	for i, m := range modes {
		for _, e := range engines {
			opts := engine.Options{Sync: m, SyncInterval: f.syncInterval, DeferWindow: deferWindow(f.syncDefer)}
			var t mqttbench.Target
			var err error
			if self != "" {
				t, err = mqttbench.TidemarkProcess(self, e, opts, f.serveFlags...)
			} else {
				t, err = mqttbench.Tidemark(e, opts)
			}
			if err != nil {
				return nil, fmt.Errorf("--engines %q: %w", e, err)
			}
			out = append(out, t)
		}
		for _, p := range mqttbench.Peers {
			if !slices.Contains(peers, p) {
				continue
			}
			t, err := mqttbench.Peer(p, m, f.syncInterval)
			if err != nil {
				return nil, fmt.Errorf("--peers %s: %w", p, err)
			}
			if t.Sync != "" {
				out = append(out, t)
			} else if i == 0 {
				once = append(once, t)
			}
		}
	}
	out = append(out, once...)
	if len(out) == 0 {
		return nil, fmt.Errorf("--engines none and --peers none: nothing to measure")
	}
	return out, nil
}

// pointLoads returns the loads --loads names, or the default set.
func (f *mqttBenchFlags) pointLoads() ([]mqttbench.Load, error) {
	if len(f.loads) == 0 {
		return mqttbench.Loads(f.quick), nil
	}
	var out []mqttbench.Load
	for _, s := range f.loads {
		l, err := mqttbench.ParseLoad(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("--loads: %w", err)
		}
		if !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out, nil
}

func runMQTTBench(cmd *cobra.Command, f *mqttBenchFlags) error {
	targets, err := f.targets()
	if err != nil {
		return err
	}
	loads, err := f.pointLoads()
	if err != nil {
		return err
	}
	dir := f.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "tidemark-bench-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--dir %q: %w", f.dir, err)
	}
	fsync, err := commitbench.FsyncRate(dir, 500*time.Millisecond)
	if err != nil {
		return fmt.Errorf("fsync probe in %s: %w", dir, err)
	}
	fsyncInPlace, err := commitbench.FsyncRateInPlace(dir, 500*time.Millisecond)
	if err != nil {
		return fmt.Errorf("fsync probe in %s: %w", dir, err)
	}
	stderr := cmd.ErrOrStderr()
	bar := progressbar.NewOptions(len(targets)*len(loads)*f.rounds,
		progressbar.OptionSetWriter(stderr), progressbar.OptionShowCount(), progressbar.OptionShowElapsedTimeOnFinish(),
		progressbar.OptionSetPredictTime(true), progressbar.OptionClearOnFinish(), progressbar.OptionFullWidth())
	// Broker warnings would tear the progress bar; they are few and go
	// above it, on their own lines.
	log := slog.New(slog.NewTextHandler(lineBreaker{stderr}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rep, err := mqttbench.Run(cmd.Context(), mqttbench.Config{
		Targets: targets, Loads: loads, Duration: f.duration, Rounds: f.rounds, Dir: dir, Logger: log,
		Progress: func(done, _ int, next string) {
			if next != "" {
				bar.Describe(next)
			}
			_ = bar.Set(done)
		},
	})
	_ = bar.Finish()
	if rep == nil {
		return err
	}
	out := cmd.OutOrStdout()
	if f.jsonOut == "-" {
		if werr := rep.WriteJSON(out); werr != nil {
			return werr
		}
	} else {
		if werr := rep.WriteTable(out); werr != nil {
			return werr
		}
		fmt.Fprintf(out, "  raw fdatasync of 64-byte appends in %s: %.0f/s (the ceiling for one synced writer without group commit); of 64-byte writes within a file's size: %.0f/s (as Pebble's WAL writes).\n", dir, fsync, fsyncInPlace)
	}
	if f.jsonOut != "" && f.jsonOut != "-" {
		if werr := writeFile(f.jsonOut, rep.WriteJSON); werr != nil {
			return fmt.Errorf("--json %q: %w", f.jsonOut, werr)
		}
	}
	if f.chart != "" {
		if werr := rep.WriteChart(f.chart); werr != nil {
			return fmt.Errorf("--chart %q: %w", f.chart, werr)
		}
		fmt.Fprintf(stderr, "chart written to %s\n", f.chart)
	}
	if err != nil {
		return err
	}
	if !rep.Clean() {
		return fmt.Errorf("some points failed or lost, duplicated or reordered messages:\n%s", strings.TrimRight(rep.Summary(), "\n"))
	}
	return nil
}

func writeFile(path string, write func(io.Writer) error) error {
	fh, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(fh); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}

// lineBreaker starts each log record on a fresh line, below whatever the
// progress bar last drew on the current one.
type lineBreaker struct{ w io.Writer }

func (l lineBreaker) Write(p []byte) (int, error) {
	if _, err := l.w.Write([]byte("\r\033[K")); err != nil {
		return 0, err
	}
	return l.w.Write(p)
}
