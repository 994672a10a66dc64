package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/internal/quietgc"
	"github.com/tidemark-io/tidemark/mqtt"
)

// serveFlags are the broker settings of `tidemark serve`.
type serveFlags struct {
	engineFlags
	partitionFlags
	securityFlags
	config      string
	printConfig bool
	mqttAddr    string
	metrics     string
	logFormat   string
	logLevel    string
	recvMax     int
	maxInflight int
	maxPacket   int
	maxQueued   int
	history     time.Duration
	tablesPfx   string
	maxExpiry   time.Duration
	retention   time.Duration
	checkpoint  time.Duration
	rules       string

	maxConns       int
	maxConnRate    float64
	connectTimeout time.Duration
	maxTopicLen    int
	maxTopicLevels int
	maxSubs        int
	maxPubRate     float64
	maxRetained    int
	maxMemMB       int
	gcPercent      int
	gcWhenQuiet    bool
	lockProfile    int
	sessionExpiry  time.Duration
	nodeIDFlag     string

	maxInflightBytes int64
	maxQueuedBytes   int64
}

func serveCmd() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the broker",
		Long: `Run the MQTT broker. Every setting can be given as a flag, as an environment
variable (TIDEMARK_ and the flag name in upper case, dashes as underscores, e.g.
TIDEMARK_SYNC_INTERVAL), or in a YAML config file whose keys are the flag names;
a flag wins over the environment, which wins over the file.`,
		Example: `  tidemark serve                         # Pebble in ./data, MQTT on 127.0.0.1:1883
  tidemark serve --engine badger --data /var/lib/tidemark --metrics 127.0.0.1:9090
  tidemark serve --engine jetstream --nats-url nats://127.0.0.1:4222 --replicas 3
  tidemark serve --engine jetstream --nats-url nats://n1:4222,nats://n2:4222 --replicas 3 --node-id tm-a
  tidemark serve --password-file passwd --acl-file acl --mqtts :8883 --tls-cert cert.pem --tls-key key.pem
  tidemark serve --config tidemark.yaml --print-config`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("config") {
				f.config = os.Getenv("TIDEMARK_CONFIG")
			}
			src, err := applyConfig(cmd.Flags(), f.config)
			if err != nil {
				return err
			}
			fromDir := f.fromDirectory(cmd.Flags())
			if fromDir {
				src["engine"] = "the data directory's " + engine.DirMarker
			}
			if f.printConfig {
				fmt.Fprint(cmd.OutOrStdout(), printConfig(cmd.Flags(), src))
				return nil
			}
			opts, bopts, log, err := f.validate()
			if err != nil {
				return err
			}
			if bopts.NodeID, err = f.nodeID(); err != nil {
				return err
			}
			if bopts.NodeID != "" {
				log = log.With("node", bopts.NodeID)
				bopts.Logger = log
			}
			opts.Logger = log
			if f.lockProfile > 0 {
				runtime.SetMutexProfileFraction(f.lockProfile)
			}
			if bopts.MaxMemory > 0 {
				// Garbage must not count against the budget: the
				// collector works harder as the heap nears it.
				debug.SetMemoryLimit(bopts.MaxMemory)
			}
			// GOGC in the environment is the runtime's own setting: it
			// stands unless the flag (or its TIDEMARK_ variable or the
			// config file) says otherwise.
			if src["gc-percent"] != "default" || os.Getenv("GOGC") == "" {
				debug.SetGCPercent(f.gcPercent)
			}
			// With the collector off until the memory budget, the
			// budget alone says when to collect.
			if f.gcWhenQuiet && gcPercent() >= 0 {
				gctx, stopGC := context.WithCancel(cmd.Context())
				defer stopGC()
				go quietgc.Run(gctx, quietgc.Options{Logger: log})
			}
			ctx := cmd.Context()
			es, err := f.openPartitions(ctx, f.name, opts, engine.Open)
			if err != nil {
				return fmt.Errorf("open engine %s in %s: %w", f.name, f.data, err)
			}
			if fromDir {
				log.Info("no --engine given: opening the data directory with the engine that wrote it", "engine", f.name, "data", f.data)
			}
			log.Info("engine open", "engine", f.name, "data", f.data, "sync", opts.Sync.String(), "defer", opts.Deferral().String(),
				"granularity", es[0].Granularity().String(), "shared", f.sharedStore(), "partitions", len(es))
			instrumented := make([]engine.Engine, len(es))
			for i, e := range es {
				instrumented[i] = instrument(e)
			}
			err = runBroker(ctx, log, instrumented, f.mqttAddr, f.metrics, &f.securityFlags, bopts)
			for _, e := range es {
				if cerr := e.Close(); cerr != nil && err == nil {
					err = fmt.Errorf("close engine: %w", cerr)
				}
			}
			log.Info("stopped")
			return err
		},
	}
	fs := cmd.Flags()
	f.engineFlags.register(fs)
	f.partitionFlags.register(fs)
	f.securityFlags.register(fs)
	fs.StringVar(&f.config, "config", "", "YAML config file (env TIDEMARK_CONFIG)")
	fs.BoolVar(&f.printConfig, "print-config", false, "print the effective configuration and exit")
	fs.StringVar(&f.mqttAddr, "mqtt", "127.0.0.1:1883", "MQTT TCP listen address (empty: no plain listener)")
	fs.StringVar(&f.metrics, "metrics", "", "Prometheus metrics, /healthz and Go profiles (/debug/pprof/) listen address, e.g. 127.0.0.1:9090 (off when empty)")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.IntVar(&f.recvMax, "receive-maximum", 1024, "unacknowledged QoS 1/2 PUBLISHes a client may send (1-65535)")
	fs.IntVar(&f.maxInflight, "max-inflight", 4096, "unacknowledged QoS 1/2 PUBLISHes the broker sends a client (1-65535; a 5.0 client's receive maximum lowers it)")
	fs.IntVar(&f.maxPacket, "max-packet-size", 1<<20, fmt.Sprintf("largest accepted packet in bytes, at most %d (what a PUBLISH stores must fit one engine value)", mqtt.MaxPacketSizeLimit))
	fs.Int64Var(&f.maxInflightBytes, "max-inflight-bytes", 0, "payload bytes of unacknowledged QoS 1/2 PUBLISHes the broker sends a client; at it further deliveries wait for acknowledgements, none is dropped, and a larger PUBLISH goes alone (0: no limit but --max-inflight)")
	fs.IntVar(&f.maxQueued, "max-queued", mqtt.DefaultMaxQueuedMessages, "messages an offline session may hold: those of its own subscriptions (QoS 1/2, not shared) after its checkpoint; past it retention drops its oldest, counted as dropped with reason retention (0: no limit, not recommended)")
	fs.Int64Var(&f.maxQueuedBytes, "max-queued-bytes", 0, "payload bytes of the messages an offline session may hold, counted as --max-queued counts them; past it retention drops its oldest, keeping the newest that fit (0: no limit)")
	fs.DurationVar(&f.maxExpiry, "max-session-expiry", 0, "cap on the session expiry 5.0 clients ask for (0: no cap)")
	fs.StringVar(&f.tablesPfx, "tables-prefix", "", "map the topics under this prefix onto table records, <prefix><table>/<id> (docs/tables.md), e.g. tables/ (empty: off)")
	fs.DurationVar(&f.history, "history", 0, "keep at least this much of the message log for replay on subscribe, e.g. 24h (0: only what sessions have not received)")
	fs.StringVar(&f.rules, "retention", "", "keep at least this much of the message log per topic filter, whatever sessions received: filter=age|count|size, comma-separated, e.g. 'sensors/#=24h,logs/#=10000msgs,big/#=512MiB' (docs/replay.md)")
	fs.DurationVar(&f.retention, "retention-every", 10*time.Second, "period of retention passes over the message log")
	fs.DurationVar(&f.checkpoint, "checkpoint-every", mqtt.DefaultCheckpointEvery, "longest an online session holds acknowledged deliveries before it persists its checkpoint; a window's worth (at most 256) is persisted at once, which bounds what a crash re-sends whatever this is")
	fs.IntVar(&f.maxConns, "max-connections", 0, "open sockets, with or without CONNECT; at the cap a new socket replaces the oldest one without CONNECT (0: the open-file limit less a tenth)")
	fs.Float64Var(&f.maxConnRate, "max-conn-rate", 0, "new sockets per second from one source address, with a burst of one second's worth (0: no limit)")
	fs.DurationVar(&f.connectTimeout, "connect-timeout", mqtt.DefaultConnectTimeout, "time a socket may take to send its CONNECT")
	fs.IntVar(&f.maxTopicLen, "max-topic-length", mqtt.MaxTopicLength, "longest topic name or filter in bytes (1-65535)")
	fs.IntVar(&f.maxTopicLevels, "max-topic-levels", 0, "most levels in a topic name or filter (0: no limit)")
	fs.IntVar(&f.maxSubs, "max-subscriptions", 0, "most subscriptions of one session (0: no limit)")
	fs.IntVar(&f.maxRetained, "max-retained", 0, "retained messages kept; past it a retained PUBLISH to a new topic is published but not retained (0: no limit)")
	fs.Float64Var(&f.maxPubRate, "max-publish-rate", 0, "PUBLISHes per second one connection may send, in bursts of a second's worth; past it the connection is read more slowly, not refused (0: no limit)")
	fs.IntVar(&f.maxMemMB, "max-memory-mb", 0, "memory budget in MiB: over it new publishes are refused (QoS 0 dropped; QoS 1/2: quota exceeded 0x97 on 5.0, connection closed on 3.1.1) and Go's memory limit is set to it (0: none)")
	fs.IntVar(&f.gcPercent, "gc-percent", defaultGCPercent, "how far, in percent of the live heap, the heap may grow before the Go collector runs (GOGC): higher spends less CPU collecting and delays deliveries less, for more memory; -1 collects only at --max-memory-mb (default 200, or GOGC when that is set)")
	fs.IntVar(&f.lockProfile, "lock-profile-rate", 0, "with --metrics: sample 1 in this many contended locks for /debug/pprof/mutex, to find where the broker queues (0: off; 100 costs little)")
	fs.BoolVar(&f.gcWhenQuiet, "gc-when-quiet", true, "run a Go collection that is more than half due when the process has been quiet for a quarter of a second, so the next burst of traffic does not meet it (not with --gc-percent -1)")
	fs.StringVar(&f.nodeIDFlag, "node-id", "", "this node's name among Tidemark nodes sharing one JetStream stream, unique among them (default with --nats-url: generated once and kept in <data>/node-id)")
	fs.DurationVar(&f.sessionExpiry, "session-expiry", mqtt.DefaultSessionExpiry, "longest any session is kept after its client disconnects, 3.1.1 persistent sessions included, so a client that never returns stops holding the message log (0: never expire, not recommended)")
	return cmd
}

// defaultGCPercent is serve's collector target. Connected sessions make
// the live heap large and the garbage per message small, so a collection
// costs much and finds little: at 200 rather than Go's 100 a fleet spends
// half the CPU on collection, and the pauses of its assists no longer
// stretch the delivery tail, for a heap up to three times what is live
// instead of two (docs/fleet.md, "Memory per session").
const defaultGCPercent = 200

// gcPercent is the collector's target in force (Go's GOGC, -1 for off).
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// minMemoryMB is the least --max-memory-mb: below it the engine's caches
// and the broker's own structures alone would keep the budget exceeded.
const minMemoryMB = 64

// validate checks every setting before anything is opened.
func (f *serveFlags) validate() (engine.Options, mqtt.Options, *slog.Logger, error) {
	var bo mqtt.Options
	opts, err := f.options()
	if err != nil {
		return opts, bo, nil, err
	}
	if err := f.partitionFlags.validate(f.name); err != nil {
		return opts, bo, nil, err
	}
	if err := f.securityFlags.validate(f.mqttAddr); err != nil {
		return opts, bo, nil, err
	}
	if err := checkListenAddr(f.mqttAddr); f.mqttAddr != "" && err != nil {
		return opts, bo, nil, fmt.Errorf("--mqtt %q: %w; want host:port, e.g. 127.0.0.1:1883", f.mqttAddr, err)
	}
	if f.metrics != "" {
		if err := checkListenAddr(f.metrics); err != nil {
			return opts, bo, nil, fmt.Errorf("--metrics %q: %w; want host:port, e.g. 127.0.0.1:9090", f.metrics, err)
		}
	}
	switch {
	case f.lockProfile < 0:
		return opts, bo, nil, fmt.Errorf("--lock-profile-rate %d: must be 0 (off) or positive", f.lockProfile)
	case f.lockProfile > 0 && f.metrics == "":
		return opts, bo, nil, fmt.Errorf("--lock-profile-rate %d: the profile is served under --metrics; give --metrics an address too", f.lockProfile)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return opts, bo, nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", f.logLevel)
	}
	hopts := &slog.HandlerOptions{Level: level}
	var log *slog.Logger
	switch strings.ToLower(f.logFormat) {
	case "text":
		log = slog.New(slog.NewTextHandler(os.Stderr, hopts))
	case "json":
		log = slog.New(slog.NewJSONHandler(os.Stderr, hopts))
	default:
		return opts, bo, nil, fmt.Errorf("--log-format %q: use text or json", f.logFormat)
	}
	switch {
	case f.recvMax < 1 || f.recvMax > 65535:
		return opts, bo, nil, fmt.Errorf("--receive-maximum %d: allowed 1 to 65535", f.recvMax)
	case f.maxInflight < 1 || f.maxInflight > 65535:
		return opts, bo, nil, fmt.Errorf("--max-inflight %d: allowed 1 to 65535", f.maxInflight)
	case f.maxPacket < 64 || f.maxPacket > mqtt.MaxPacketSizeLimit:
		return opts, bo, nil, fmt.Errorf("--max-packet-size %d: allowed 64 to %d bytes (what a PUBLISH stores must fit one engine value of %d bytes)",
			f.maxPacket, mqtt.MaxPacketSizeLimit, engine.MaxValueSize)
	case f.maxQueued < 0:
		return opts, bo, nil, fmt.Errorf("--max-queued %d: must be 0 (no limit) or positive, e.g. %d", f.maxQueued, mqtt.DefaultMaxQueuedMessages)
	case f.maxInflightBytes < 0:
		return opts, bo, nil, fmt.Errorf("--max-inflight-bytes %d: must be 0 (no limit) or positive, e.g. 1048576", f.maxInflightBytes)
	case f.maxQueuedBytes < 0:
		return opts, bo, nil, fmt.Errorf("--max-queued-bytes %d: must be 0 (no limit) or positive, e.g. 104857600", f.maxQueuedBytes)
	case f.maxExpiry < 0:
		return opts, bo, nil, fmt.Errorf("--max-session-expiry %v: must be 0 (no cap) or positive", f.maxExpiry)
	case f.history < 0:
		return opts, bo, nil, fmt.Errorf("--history %v: must be 0 (keep no history) or positive, e.g. 24h", f.history)
	case f.retention <= 0:
		return opts, bo, nil, fmt.Errorf("--retention-every %v: must be positive", f.retention)
	case f.checkpoint <= 0:
		return opts, bo, nil, fmt.Errorf("--checkpoint-every %v: must be positive, e.g. 1s", f.checkpoint)
	case f.maxConns < 0:
		return opts, bo, nil, fmt.Errorf("--max-connections %d: must be 0 (from the open-file limit) or positive", f.maxConns)
	case f.maxConnRate < 0:
		return opts, bo, nil, fmt.Errorf("--max-conn-rate %v: must be 0 (no limit) or positive, e.g. 20", f.maxConnRate)
	case f.connectTimeout <= 0:
		return opts, bo, nil, fmt.Errorf("--connect-timeout %v: must be positive, e.g. 10s", f.connectTimeout)
	case f.maxTopicLen < 1 || f.maxTopicLen > mqtt.MaxTopicLength:
		return opts, bo, nil, fmt.Errorf("--max-topic-length %d: allowed 1 to %d bytes", f.maxTopicLen, mqtt.MaxTopicLength)
	case f.maxTopicLevels < 0:
		return opts, bo, nil, fmt.Errorf("--max-topic-levels %d: must be 0 (no limit) or positive", f.maxTopicLevels)
	case f.maxSubs < 0:
		return opts, bo, nil, fmt.Errorf("--max-subscriptions %d: must be 0 (no limit) or positive", f.maxSubs)
	case f.maxRetained < 0:
		return opts, bo, nil, fmt.Errorf("--max-retained %d: must be 0 (no limit) or positive, e.g. 100000", f.maxRetained)
	case f.maxPubRate < 0:
		return opts, bo, nil, fmt.Errorf("--max-publish-rate %v: must be 0 (no limit) or positive, e.g. 100", f.maxPubRate)
	case f.maxMemMB < 0 || (f.maxMemMB > 0 && f.maxMemMB < minMemoryMB):
		return opts, bo, nil, fmt.Errorf("--max-memory-mb %d: must be 0 (no budget) or at least %d (the broker and engine caches need that much), e.g. 1024", f.maxMemMB, minMemoryMB)
	case f.gcPercent < 10 && f.gcPercent != -1:
		return opts, bo, nil, fmt.Errorf("--gc-percent %d: must be at least 10, or -1 (collect only at the memory budget) with --max-memory-mb, e.g. %d", f.gcPercent, defaultGCPercent)
	case f.gcPercent == -1 && f.maxMemMB == 0:
		return opts, bo, nil, fmt.Errorf("--gc-percent -1 turns the collector off until the memory budget, and there is none: set --max-memory-mb too, e.g. --max-memory-mb 4096")
	case f.sessionExpiry < 0 || (f.sessionExpiry > 0 && f.sessionExpiry < time.Second):
		return opts, bo, nil, fmt.Errorf("--session-expiry %v: must be 0 (never) or at least 1s, e.g. %v", f.sessionExpiry, mqtt.DefaultSessionExpiry)
	}
	// 0 on the command line is no limit, which mqtt.Options spells as a
	// negative value (its zero is the default).
	maxQueued, sessionExpiry := f.maxQueued, f.sessionExpiry
	if maxQueued == 0 {
		maxQueued = -1
	}
	if sessionExpiry == 0 {
		sessionExpiry = -1
	}
	rules, err := mqtt.ParseRetention(f.rules)
	if err != nil {
		return opts, bo, nil, fmt.Errorf("--retention %q: %w", f.rules, err)
	}
	bo = mqtt.Options{Logger: log, ReceiveMaximum: f.recvMax, MaxInflight: f.maxInflight, MaxPacketSize: f.maxPacket,
		MaxInflightBytes: f.maxInflightBytes, MaxQueuedMessages: maxQueued, MaxQueuedBytes: f.maxQueuedBytes, MaxSessionExpiry: f.maxExpiry, RetentionEvery: f.retention, CheckpointEvery: f.checkpoint,
		MaxConnections: f.maxConns, MaxConnRate: f.maxConnRate, ConnectTimeout: f.connectTimeout,
		MaxTopicLength: f.maxTopicLen, MaxTopicLevels: f.maxTopicLevels, MaxSubscriptions: f.maxSubs,
		SessionExpiry: sessionExpiry, History: f.history, TablesPrefix: f.tablesPfx, Retention: rules,
		MaxMemory: int64(f.maxMemMB) << 20, MaxPublishRate: f.maxPubRate, MaxRetained: f.maxRetained}
	return opts, bo, log, nil
}
