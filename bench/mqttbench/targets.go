package mqttbench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/table"
)

// Kind is the broker software a Target runs.
type Kind string

// The brokers the benchmark knows.
const (
	KindTidemark  Kind = "tidemark"
	KindNATS      Kind = "nats-server"
	KindMochi     Kind = "mochi"
	KindMosquitto Kind = "mosquitto"
)

// Target is one broker configuration the benchmark drives. Each point
// starts it afresh in an empty data directory.
type Target struct {
	// Name labels the target in reports ("tidemark/pebble", "nats-server",
	// "mochi", "mosquitto").
	Name string `json:"name"`
	// Kind is the broker software.
	Kind Kind `json:"kind"`
	// Engine is the Tidemark storage engine; empty for the peers.
	Engine string `json:"engine,omitempty"`
	// Sync is the durability setting: always, interval or none; empty
	// for mochi and mosquitto, which have no such setting.
	Sync string `json:"sync,omitempty"`
	// Durability says what the broker has done on disk when it
	// acknowledges a message, so throughput is compared honestly.
	Durability string `json:"durability"`

	start func(ctx context.Context, dir string, log *slog.Logger) (*instance, error)
	// startOn, for an embedded peer, starts it with its MQTT listener on
	// addr (see ServePeer).
	startOn func(ctx context.Context, dir, addr string, log *slog.Logger) (*instance, error)
}

// Label is the name with the sync setting, unique within a run.
func (t Target) Label() string {
	if t.Sync == "" {
		return t.Name
	}
	return t.Name + " " + t.Sync
}

// instance is a running broker.
type instance struct {
	addr string
	stop func() error
	// external: the broker runs in a process of its own, so this
	// process's CPU time is the load generator's alone; pid is that
	// process's, whose CPU time is the broker's.
	external bool
	pid      int
}

// Tidemark returns a target running Tidemark's broker in this process on
// the registered engine name with opts (its sync mode, interval and defer
// window; each run gets its own Dir and Logger). The engine must be
// compiled in.
func Tidemark(name string, opts engine.Options) (Target, error) {
	if _, err := engine.Lookup(name); err != nil {
		return Target{}, err
	}
	mode := opts.Sync
	t := Target{Name: "tidemark/" + name, Kind: KindTidemark, Engine: name, Sync: mode.String(),
		Durability: tidemarkDurability(name, opts)}
	t.start = func(ctx context.Context, dir string, log *slog.Logger) (*instance, error) {
		o := opts
		o.Dir, o.Logger = dir, log
		return startTidemark(ctx, name, o, log)
	}
	return t, nil
}

// tidemarkDurability says what an acknowledgement from Tidemark on engine
// name with opts means on disk, for the report's footer.
func tidemarkDurability(name string, opts engine.Options) string {
	d := syncDurability(name, opts.Sync, opts.Interval(), opts.Deferral())
	// The jetstream engine defers in every mode: each commit is a round
	// trip through the server.
	if name == "jetstream" && opts.Sync != engine.SyncAlways {
		if w := opts.DeferralAnyMode(); w > 0 {
			d += "; a subscriber's delivery records may wait up to " + w.String() + " to share the next commit's message"
		}
	}
	return d
}

// syncDurability is tidemarkDurability for the sync mode alone.
func syncDurability(name string, mode engine.SyncMode, interval, deferral time.Duration) string {
	const ack = "PUBACK, PUBREC and PUBCOMP wait for the commit of the message (QoS 2: staged copy, then release into the log)"
	js := ""
	if name == "jetstream" {
		js = " (embedded nats-server file store)"
	}
	switch mode {
	case engine.SyncAlways:
		d := ack + "; fsynced" + js + " before the acknowledgement, one fsync per group of waiting commits"
		if deferral > 0 {
			d += "; a subscriber's delivery records may wait up to " + deferral.String() + " to share the next fsync"
		}
		return d
	case engine.SyncInterval:
		return ack + "; written to the OS" + js + " before the acknowledgement, fsynced every " + interval.String() +
			": an OS crash can lose that much, a process crash nothing"
	}
	if name == "jetstream" {
		return ack + "; written to the OS (embedded nats-server, its default 2 min sync interval): an OS crash can lose minutes, a process crash nothing"
	}
	return ack + "; written to the OS, never fsynced by the engine: an OS crash can lose what the OS had not flushed, a process crash nothing"
}

func startTidemark(ctx context.Context, name string, opts engine.Options, log *slog.Logger) (*instance, error) {
	e, err := engine.Open(ctx, name, opts)
	if err != nil {
		return nil, fmt.Errorf("open engine %s: %w", name, err)
	}
	db, err := table.Open(ctx, e, table.Options{Logger: log})
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("open tables: %w", err)
	}
	// No queue limit and no session expiry, as mosquitto is configured.
	b, err := mqtt.New(db, mqtt.Options{Logger: log, MaxQueuedMessages: -1, SessionExpiry: -1})
	if err != nil {
		db.Close()
		e.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Close()
		db.Close()
		e.Close()
		return nil, err
	}
	served := make(chan error, 1)
	go func() { served <- b.Serve(ln) }()
	return &instance{addr: ln.Addr().String(), stop: func() error {
		err := b.Close()
		// Serve may report the listener it was closing under it.
		if serr := <-served; serr != nil && !errors.Is(serr, net.ErrClosed) {
			err = errors.Join(err, serr)
		}
		return errors.Join(err, db.Close(), e.Close())
	}}, nil
}

// Peers are the peer brokers a run can include, by the name --peers takes.
// mosquitto runs as a separate process and must be installed.
var Peers = []string{"nats", "mochi", "mosquitto"}

// DefaultPeers are the peers of a run that names none: the embedded ones
// this build has, which need nothing installed.
var DefaultPeers = embeddedPeers()

func embeddedPeers() []string {
	var out []string
	if natsOmitted == "" {
		out = append(out, "nats")
	}
	if mochiOmitted == "" {
		out = append(out, "mochi")
	}
	return out
}

// Peer returns the target of a peer by name (one of Peers). nats-server
// follows the sync mode the way Tidemark's engines do; mochi and mosquitto
// have no such setting and ignore it. For mosquitto it fails with
// ErrNotInstalled, naming the package to install, when the broker is not
// on PATH or in /usr/sbin; for an embedded peer this build left out, with
// the tag that removed it.
func Peer(name string, mode engine.SyncMode, interval time.Duration) (Target, error) {
	if interval <= 0 {
		interval = engine.DefaultSyncInterval
	}
	switch name {
	case "nats":
		if natsOmitted != "" {
			return Target{}, errors.New(natsOmitted)
		}
		return natsTarget(mode, interval), nil
	case "mochi":
		if mochiOmitted != "" {
			return Target{}, errors.New(mochiOmitted)
		}
		return mochiTarget(), nil
	case "mosquitto":
		bin, err := findMosquitto(mosquittoSbin)
		if err != nil {
			return Target{}, err
		}
		return mosquittoTarget(bin), nil
	}
	return Target{}, fmt.Errorf("unknown peer %q: use one of %s", name, strings.Join(Peers, ", "))
}
