package mqttbench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/internal/proc"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// Load is the traffic of one point: Conns publisher connections, each
// keeping up to Window PUBLISHes of QoS unacknowledged.
type Load struct {
	QoS    byte `json:"qos"`
	Window int  `json:"window"`
	Conns  int  `json:"conns"`
}

// String is the load's label in reports: "QoS 2 w256" or "QoS 1 w16 x50".
func (l Load) String() string {
	s := fmt.Sprintf("QoS %d w%d", l.QoS, l.Window)
	if l.Conns > 1 {
		s += fmt.Sprintf(" x%d", l.Conns)
	}
	return s
}

// Name is the load's short name, as ParseLoad reads it and sub-benchmarks
// are named: "qos2-w256" or "qos1-w16-x50".
func (l Load) Name() string {
	s := fmt.Sprintf("qos%d-w%d", l.QoS, l.Window)
	if l.Conns > 1 {
		s += fmt.Sprintf("-x%d", l.Conns)
	}
	return s
}

// ParseLoad reads a load's Name ("qos2-w1", "qos1-w16-x50"; the
// connection count defaults to one).
func ParseLoad(s string) (Load, error) {
	var l Load
	var rest string
	bad := fmt.Errorf("load %q: want qos<0-2>-w<window>[-x<connections>], for example qos2-w1 or qos1-w16-x50", s)
	n, err := fmt.Sscanf(s, "qos%d-w%d%s", &l.QoS, &l.Window, &rest)
	if n < 2 || (err != nil && n != 2) {
		return Load{}, bad
	}
	l.Conns = 1
	if rest != "" {
		if _, err := fmt.Sscanf(rest, "-x%d", &l.Conns); err != nil || fmt.Sprintf("-x%d", l.Conns) != rest {
			return Load{}, bad
		}
	}
	if l.QoS > 2 || l.Window < 1 || l.Window > 65535 || l.Conns < 1 {
		return Load{}, bad
	}
	return l, nil
}

// Windows are the windows of the single-connection curves.
var Windows = []int{1, 16, 256}

// ManyConns is the connection count of the aggregate points.
const ManyConns = 50

// blockingConns is the most publisher connections a load may have for the
// load generator to use blocking sockets (see fdConn), a thread each while
// waiting; above it, the runtime's poller serves them with a few threads.
const blockingConns = 4

// Loads returns the points of a run: QoS 0, 1 and 2 on one connection at
// each of Windows, then QoS 1 and 2 over ManyConns connections at window
// 16. A quick run keeps two windows and ten connections.
func Loads(quick bool) []Load {
	windows, conns := Windows, ManyConns
	if quick {
		windows, conns = []int{1, 16}, 10
	}
	var out []Load
	for qos := byte(0); qos <= 2; qos++ {
		for _, w := range windows {
			out = append(out, Load{QoS: qos, Window: w, Conns: 1})
		}
	}
	return append(out, Load{QoS: 1, Window: 16, Conns: conns}, Load{QoS: 2, Window: 16, Conns: conns})
}

// Config configures Run.
type Config struct {
	// Targets are the brokers to drive; every load runs on each.
	Targets []Target
	// Loads are the points.
	Loads []Load
	// Duration is how long publishers send at each point; the point then
	// waits for the messages in flight and for the subscriber to drain.
	Duration time.Duration
	// Warmup is how long publishers send before Duration starts: those
	// messages are checked for loss, duplicates and order like the rest
	// but left out of rates and latencies, so every point is measured
	// with its broker warm (the process's own warm-up is LoadWarmup's).
	// Zero means Duration/5; negative, none.
	Warmup time.Duration
	// LoadWarmup is how long an unmeasured point of a load of several
	// connections runs on the first target before the load's first
	// point. The process needs it, not the broker: memory the Go runtime
	// gave back to the OS in between costs a page fault per page when a
	// load needs it again, and the first point of 50 connections after a
	// while measured half the rate of the same point run right after it,
	// whatever the target (GODEBUG=madvdontneed=0 avoids that too). Zero
	// means one second; negative, none.
	LoadWarmup time.Duration
	// Rounds is how many times each point runs (default 1): within a
	// load, every target once per round, in turn, so a slow spell of the
	// machine lands on the targets alike. A point reports the round of
	// the median rate (see mergeRounds).
	Rounds int
	// Dir is where the brokers' data directories go, each removed after
	// its point; a temporary directory when empty.
	Dir string
	// Logger receives the brokers' logs; when nil, warnings and errors go
	// to standard error.
	Logger *slog.Logger
	// Progress, when set, is called before each point with the points done,
	// the total and a description of the next, and once at the end.
	Progress func(done, total int, next string)
	// DrainTimeout bounds the wait for acknowledgements after the send
	// phase (default 30 s); IdleTimeout ends the wait for the subscriber
	// when nothing arrived for that long (default 10 s).
	DrainTimeout, IdleTimeout time.Duration
}

// Result is one measured point.
type Result struct {
	// Target is the target's Label.
	Target string `json:"target"`
	Kind   Kind   `json:"kind"`
	Engine string `json:"engine,omitempty"`
	Sync   string `json:"sync,omitempty"`
	Load   Load   `json:"load"`
	// Messages is the number of messages acknowledged (QoS 0: delivered),
	// warm-up included; Measured those acknowledged after the warm-up,
	// Seconds the time from the end of the warm-up until the last of
	// them was both acknowledged and delivered, and PerSecond their
	// quotient: a broker that acknowledges faster than it delivers is
	// measured at the rate it delivers. AckedPerSecond is Measured over
	// the time to the last acknowledgement alone, and BehindMs how long
	// the last delivery came after it. With several rounds, Messages and
	// Measured add up the rounds', and the rates, Seconds, BehindMs and
	// the latencies are the round's of the median rate.
	Messages       int     `json:"messages"`
	Measured       int     `json:"measured"`
	Seconds        float64 `json:"seconds"`
	PerSecond      float64 `json:"msgs_per_sec"`
	AckedPerSecond float64 `json:"acked_per_sec"`
	BehindMs       float64 `json:"behind_ms"`
	// P50Ms and P99Ms are the acknowledgement latency quantiles (QoS 0:
	// publish to delivery) in milliseconds, after the warm-up.
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	// DeliveryP50Ms and DeliveryP99Ms are the quantiles of the time from
	// a PUBLISH's sending to its first delivery to the subscriber, in
	// milliseconds, over the Timed deliveries made after the warm-up:
	// what a subscriber left behind waits.
	DeliveryP50Ms float64 `json:"delivery_p50_ms"`
	DeliveryP99Ms float64 `json:"delivery_p99_ms"`
	Timed         int     `json:"deliveries_timed"`
	// Delivered counts distinct messages the subscriber received; Lost the
	// acknowledged (QoS 0: sent) ones it never did; Duplicates and
	// Reordered what it received twice or after a later message of the
	// same publisher.
	Delivered  int `json:"delivered"`
	Lost       int `json:"lost"`
	Duplicates int `json:"duplicates"`
	Reordered  int `json:"reordered"`
	// Unacked counts messages still unacknowledged when the drain gave up.
	Unacked int `json:"unacked"`
	// ProtocolErrors counts packets no correct broker sends, and
	// ProtocolError describes one: the first that a client saw, the
	// publishers taken in order before the subscriber.
	ProtocolErrors int    `json:"protocol_errors"`
	ProtocolError  string `json:"protocol_error,omitempty"`
	// ClientMicros is the CPU time (user and system) this process spent
	// per acknowledged message while sending, in microseconds: the load
	// generator's own cost per exchange, publishers and subscriber
	// together. Set only for a broker in a process of its own (mosquitto,
	// TidemarkProcess); for one in this process it would include the
	// broker.
	ClientMicros float64 `json:"client_us_per_msg,omitempty"`
	// BrokerMicros is the broker process's CPU time per acknowledged
	// message over the same span (10 ms resolution), for a broker in a
	// process of its own: what an exchange costs the broker, next to
	// ClientMicros.
	BrokerMicros float64 `json:"broker_us_per_msg,omitempty"`
	// VsNATS, VsMochi and VsMosquitto are msgs/s over the peer's at the
	// same load (and for nats-server the same sync mode); zero when the
	// peer did not run.
	VsNATS      float64 `json:"vs_nats,omitempty"`
	VsMochi     float64 `json:"vs_mochi,omitempty"`
	VsMosquitto float64 `json:"vs_mosquitto,omitempty"`
	// Rounds holds each round's msgs/s, in run order, when the point
	// ran more than once.
	Rounds []float64 `json:"rounds_msgs_per_sec,omitempty"`
	// Err is why the point failed, if it did.
	Err string `json:"error,omitempty"`
}

// Clean reports whether the point ran, every message sent was
// acknowledged and every acknowledged message was delivered exactly once
// and in order.
func (r Result) Clean() bool {
	return r.Err == "" && r.Lost == 0 && r.Duplicates == 0 && r.Reordered == 0 && r.Unacked == 0 && r.ProtocolErrors == 0
}

// Run drives every load at every target, one point at a time (each load
// across all targets before the next, so a disturbance on the machine
// hits the targets alike), and returns the results. A point that fails is
// reported in its Result; Run itself fails only when ctx ends.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if len(cfg.Targets) == 0 || len(cfg.Loads) == 0 || cfg.Duration <= 0 {
		return nil, errors.New("mqttbench: Run needs targets, loads and a positive duration")
	}
	for _, l := range cfg.Loads {
		if l.QoS > 2 || l.Window < 1 || l.Window > 65535 || l.Conns < 1 {
			return nil, fmt.Errorf("mqttbench: invalid load %+v", l)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = 30 * time.Second
	}
	switch {
	case cfg.Warmup == 0:
		cfg.Warmup = cfg.Duration / 5
	case cfg.Warmup < 0:
		cfg.Warmup = 0
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 10 * time.Second
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "tidemark-mqttbench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	if cfg.Rounds <= 0 {
		cfg.Rounds = 1
	}
	rep := &Report{Duration: cfg.Duration, Warmup: cfg.Warmup, Rounds: cfg.Rounds}
	rep.Targets = append(rep.Targets, cfg.Targets...)
	total := len(cfg.Targets) * len(cfg.Loads) * cfg.Rounds
	base := rand.Uint32()
	if cfg.LoadWarmup == 0 {
		cfg.LoadWarmup = time.Second
	}
	i := 0
	for _, l := range cfg.Loads {
		if l.Conns > 1 && cfg.LoadWarmup > 0 {
			t := cfg.Targets[0]
			if cfg.Progress != nil {
				cfg.Progress(i, total, "warm-up: "+t.Label()+" "+l.String())
			}
			wcfg := cfg
			wcfg.Duration, wcfg.Warmup = cfg.LoadWarmup, 0
			pdir := filepath.Join(dir, "warm-up")
			_ = runPoint(ctx, wcfg, t, l, pdir, base-1) // its figures are not reported
			_ = os.RemoveAll(pdir)
		}
		rounds := make([][]Result, len(cfg.Targets))
		for round := range cfg.Rounds {
			for ti, t := range cfg.Targets {
				next := t.Label() + " " + l.String()
				if cfg.Rounds > 1 {
					next += fmt.Sprintf(" (round %d of %d)", round+1, cfg.Rounds)
				}
				if cfg.Progress != nil {
					cfg.Progress(i, total, next)
				}
				if err := ctx.Err(); err != nil {
					return rep, err
				}
				pdir := filepath.Join(dir, fmt.Sprintf("%03d-%s", i, slug(t.Label()+" "+l.String())))
				r := runPoint(ctx, cfg, t, l, pdir, base+uint32(i))
				_ = os.RemoveAll(pdir)
				rounds[ti] = append(rounds[ti], r)
				i++
			}
		}
		for _, rs := range rounds {
			rep.Results = append(rep.Results, mergeRounds(rs))
		}
	}
	if cfg.Progress != nil {
		cfg.Progress(total, total, "")
	}
	rep.compare()
	return rep, ctx.Err()
}

// mergeRounds makes one Result of a point's rounds: the round of the
// median rate (the lower middle one of an even number) gives the rate and
// latencies, the CPU figures are the medians of the rounds', and what
// counts messages or failures adds up over the rounds, so a loss or a
// protocol error in any round shows. A round that failed fails the point.
func mergeRounds(rs []Result) Result {
	if len(rs) == 1 {
		return rs[0]
	}
	byRate := slices.Clone(rs)
	slices.SortStableFunc(byRate, func(a, b Result) int { return cmp.Compare(a.PerSecond, b.PerSecond) })
	m := byRate[(len(byRate)-1)/2]
	m.Messages, m.Measured, m.Delivered = 0, 0, 0
	m.Lost, m.Duplicates, m.Reordered, m.Unacked, m.ProtocolErrors = 0, 0, 0, 0, 0
	m.ProtocolError, m.Err = "", ""
	var client, broker []float64
	for k, r := range rs {
		m.Rounds = append(m.Rounds, r.PerSecond)
		m.Messages += r.Messages
		m.Measured += r.Measured
		m.Delivered += r.Delivered
		m.Lost += r.Lost
		m.Duplicates += r.Duplicates
		m.Reordered += r.Reordered
		m.Unacked += r.Unacked
		m.ProtocolErrors += r.ProtocolErrors
		if m.ProtocolError == "" {
			m.ProtocolError = r.ProtocolError
		}
		if r.Err != "" && m.Err == "" {
			m.Err = fmt.Sprintf("round %d of %d: %s", k+1, len(rs), r.Err)
		}
		if r.ClientMicros > 0 {
			client = append(client, r.ClientMicros)
		}
		if r.BrokerMicros > 0 {
			broker = append(broker, r.BrokerMicros)
		}
	}
	m.ClientMicros, m.BrokerMicros = median(client), median(broker)
	return m
}

// median is the middle value of vs (the mean of the two middle ones of
// an even number); zero for none.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func slug(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return '-'
	}, s)
}

// runPoint starts t, runs load l against it and stops it.
func runPoint(ctx context.Context, cfg Config, t Target, l Load, dir string, run uint32) (r Result) {
	r = Result{Target: t.Label(), Kind: t.Kind, Engine: t.Engine, Sync: t.Sync, Load: l}
	fail := func(err error) Result {
		if r.Err == "" {
			r.Err = err.Error()
		}
		return r
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	inst, err := t.start(ctx, dir, cfg.Logger)
	if err != nil {
		return fail(fmt.Errorf("start: %w", err))
	}
	defer func() {
		if err := inst.stop(); err != nil {
			fail(fmt.Errorf("stop: %w", err))
		}
	}()
	qos := packet.QoS(l.QoS)
	prefix := fmt.Sprintf("mqttbench/%08x", run)
	// Blocking sockets for a broker in a process of its own (see fdConn),
	// with a processor to spare while every reader waits in the kernel:
	// the runtime then leaves each waiting reader its processor, and the
	// client's cost per exchange does not grow with the broker's latency.
	// A broker in this process keeps the poller and the processors, and
	// so does QoS 0: its publisher is woken by the subscriber's reader
	// through a channel rather than writing from the reader, and a
	// goroutine woken beside a reader blocked in the kernel costs more
	// the longer the broker takes.
	blocking := inst.external && l.Conns <= blockingConns && qos != packet.QoS0
	if want := l.Conns + 2; blocking && runtime.GOMAXPROCS(0) < want {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(want))
	}
	sub, err := subscribe(ctx, inst.addr, fmt.Sprintf("mqttbench-%08x-sub", run), prefix+"/+", run, qos, l.Conns, blocking)
	if err != nil {
		return fail(err)
	}
	defer sub.c.close()

	pubs := make([]*publisher, l.Conns)
	errs := make([]error, l.Conns)
	var wg sync.WaitGroup
	for i := range pubs {
		wg.Go(func() {
			c, err := dial(ctx, inst.addr, fmt.Sprintf("mqttbench-%08x-pub-%d", run, i), blocking)
			if err != nil {
				errs[i] = fmt.Errorf("publisher %d: %w", i, err)
				return
			}
			pubs[i] = newPublisher(c, run, uint32(i), qos, l.Window, fmt.Sprintf("%s/%d", prefix, i))
		})
	}
	wg.Wait()
	defer func() {
		for _, p := range pubs {
			if p != nil {
				p.c.close()
			}
		}
	}()
	if err := errors.Join(errs...); err != nil {
		return fail(err)
	}
	if qos == packet.QoS0 {
		sub.mu.Lock()
		sub.notify = func(pub uint32, seq uint64, at time.Time) { pubs[pub].delivered(seq, at) }
		sub.mu.Unlock()
	}

	stop := make(chan struct{})
	start := time.Now().Add(cfg.Warmup)
	for _, p := range pubs {
		p.from = start
	}
	sub.mu.Lock()
	sub.from = start
	sub.mu.Unlock()
	timer := time.AfterFunc(cfg.Warmup+cfg.Duration, func() { close(stop) })
	defer timer.Stop()
	cpu0, bcpu0 := proc.SelfCPU(), brokerCPU(inst)
	for i, p := range pubs {
		wg.Go(func() {
			if err := p.publish(ctx, stop, cfg.DrainTimeout); err != nil {
				errs[i] = fmt.Errorf("publisher %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	cpu, bcpu := proc.SelfCPU()-cpu0, brokerCPU(inst)-bcpu0

	acked := make([]bitset, len(pubs))
	var hist histogram
	var last time.Time
	var protoErrs protoErrors
	for i, p := range pubs {
		p.mu.Lock()
		acked[i] = append(bitset(nil), p.acked...)
		r.Messages += p.done
		r.Measured += p.measured
		r.Unacked += int(p.nextSeq) - p.done
		protoErrs.merge(p.protoErrs)
		hist.merge(&p.hist)
		if p.last.After(last) {
			last = p.last
		}
		p.mu.Unlock()
	}
	if qos == packet.QoS0 {
		r.Unacked = 0 // nothing to acknowledge; undelivered ones count as lost
	}
	if inst.external && cpu > 0 && r.Messages > 0 {
		r.ClientMicros = float64(cpu.Microseconds()) / float64(r.Messages)
		r.BrokerMicros = float64(bcpu.Microseconds()) / float64(r.Messages)
	}
	sub.wait(ctx, acked, cfg.IdleTimeout)
	r.Lost = sub.missing(acked)
	sub.mu.Lock()
	r.Delivered, r.Duplicates, r.Reordered = sub.unique, sub.dups, sub.reordered
	protoErrs.merge(sub.protoErrs)
	r.ProtocolErrors, r.ProtocolError = protoErrs.n, protoErrs.first
	serr, delivered := sub.readErr, sub.last
	r.DeliveryP50Ms = ms(sub.delivery.quantile(0.50))
	r.DeliveryP99Ms = ms(sub.delivery.quantile(0.99))
	r.Timed = int(sub.delivery.n)
	sub.mu.Unlock()
	if last.After(start) {
		r.AckedPerSecond = float64(r.Measured) / last.Sub(start).Seconds()
		end := last
		if delivered.After(last) {
			// Every message was delivered by then (or counts as lost).
			end = delivered
			r.BehindMs = ms(delivered.Sub(last))
		}
		r.Seconds = end.Sub(start).Seconds()
		r.PerSecond = float64(r.Measured) / r.Seconds
	}
	r.P50Ms = ms(hist.quantile(0.50))
	r.P99Ms = ms(hist.quantile(0.99))
	if err := errors.Join(errs...); err != nil {
		return fail(err)
	}
	if serr != nil {
		return fail(fmt.Errorf("subscriber: %w", serr))
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	return r
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// brokerCPU is the CPU time the broker of inst used so far, when it runs
// in a process of its own; zero otherwise.
func brokerCPU(inst *instance) time.Duration {
	if inst.pid == 0 {
		return 0
	}
	return proc.CPU(inst.pid)
}
