// Package fleet measures a broker serving a fleet of devices, each a
// persistent MQTT 3.1.1 session with a topic of its own: what a connected
// session costs in resident memory, how fast sessions are set up and
// re-established after a mass disconnect, and how fast messages spread
// over the fleet (each to one device) and fan out to all of it, checking
// every delivery for loss and duplicates.
//
// Every broker runs as a process of its own (Tidemark as `tidemark
// serve`, mosquitto from its Debian package), so its resident memory is
// read from /proc alone, and the client side is one lean process: raw
// MQTT packets on blocking sockets, read through epoll by two goroutines
// on Linux (see client_linux.go).
package fleet

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark-io/tidemark/internal/freeport"
	"github.com/tidemark-io/tidemark/internal/proc"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// Broker is one broker under test.
type Broker struct {
	// Name labels it in the report ("tidemark/pebble always", "mosquitto").
	Name string
	// Start runs it in dir on a free loopback port and returns its
	// address, its process id and how to stop it.
	Start func(ctx context.Context, dir string, port int) (addr string, pid int, stop func() error, err error)
	// Seed, if set, stores n offline persistent sessions in dir before
	// Start, for the offline load (see RunOffline).
	Seed func(ctx context.Context, dir string, n int) error
}

// Tidemark is a broker running `bin serve` on engine with sync mode sync,
// and extra flags if any. Its Seed opens engine through the engine
// registry, so the calling binary must link the engine in.
func Tidemark(bin, engine, sync string, extra ...string) Broker {
	return Broker{Name: "tidemark/" + engine + " " + sync, Start: func(ctx context.Context, dir string, port int) (string, int, func() error, error) {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		args := append([]string{"serve", "--engine", engine, "--sync", sync, "--data", filepath.Join(dir, "data"),
			"--mqtt", addr, "--max-connections", "19900", "--log-level", "warn",
			// As mosquitto is configured (max_queued_messages 0; its
			// persistent sessions never expire by default).
			"--max-queued", "0", "--session-expiry", "0"}, extra...)
		return startProcess(ctx, dir, addr, bin, args...)
	}, Seed: func(ctx context.Context, dir string, n int) error {
		return seedTidemark(ctx, engine, filepath.Join(dir, "data"), n)
	}}
}

// Mosquitto is a mosquitto process with persistence on (its autosave
// writes the whole database every 30 min and at exit, never per message).
func Mosquitto(bin string) Broker {
	return Broker{Name: "mosquitto", Start: func(ctx context.Context, dir string, port int) (string, int, func() error, error) {
		conf := filepath.Join(dir, "mosquitto.conf")
		text := fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location %s/\n"+
			"max_inflight_messages 0\nmax_queued_messages 0\nset_tcp_nodelay true\nsys_interval 0\nlog_dest stderr\nlog_type error\n", port, dir)
		if os.Geteuid() == 0 {
			text += "user root\n"
		}
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			return "", 0, nil, err
		}
		return startProcess(ctx, dir, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), bin, "-c", conf)
	}}
}

// Embedded is an embedded peer of `tidemark bench` (mqttbench.Peers:
// "nats" or "mochi") run by `bin bench peer` as a process of its own;
// nats-server fsyncs by sync (always, interval or none), mochi has no
// such setting.
func Embedded(bin, peer, sync string) Broker {
	name := map[string]string{"nats": "nats-server"}[peer]
	if name == "" {
		name = peer
	}
	return Broker{Name: name, Start: func(ctx context.Context, dir string, port int) (string, int, func() error, error) {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		return startProcess(ctx, dir, addr, bin, "bench", "peer", "--peer", peer, "--sync", sync,
			"--dir", filepath.Join(dir, "data"), "--mqtt", addr)
	}}
}

// startProcess runs bin in dir, its output in dir/broker.log, and waits
// until it accepts connections on addr.
func startProcess(ctx context.Context, dir, addr, bin string, args ...string) (string, int, func() error, error) {
	logf, err := os.Create(filepath.Join(dir, "broker.log"))
	if err != nil {
		return "", 0, nil, err
	}
	p, err := proc.Start(proc.Spec{Bin: bin, Args: args, Dir: dir, Log: logf})
	if err != nil {
		logf.Close()
		return "", 0, nil, err
	}
	stop := func() error {
		defer logf.Close()
		return p.Stop(30 * time.Second)
	}
	if err := p.WaitListen(ctx, addr, 30*time.Second, nil); err != nil {
		p.Kill()
		logf.Close()
		return "", 0, nil, err
	}
	return addr, p.Pid(), stop, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

// Result is one broker at one fleet size.
type Result struct {
	Broker   string
	Sessions int
	// SetupRate is sessions set up per second (CONNECT + SUBSCRIBE of two
	// filters, 32 at a time); ReconnectRate the same for reconnecting
	// every session after all dropped (CONNECT only, session present).
	SetupRate, ReconnectRate float64
	// RSS is the broker's resident memory with the fleet connected and
	// idle; PerSession is its growth over the empty broker per session.
	RSS, PerSession int64
	// Spread is deliveries per second of messages each to one device's
	// own topic, SpreadRounds per device (see Config.SpreadMessages); P50 and P99
	// their latencies from publication.
	Spread       float64
	SpreadRounds int
	P50, P99     time.Duration
	// Timeline is the spread's deliveries by when they were published, in
	// windows of timelineStep: where in the load the slow ones were.
	Timeline []Window
	// Fanout is deliveries per second of messages every device receives.
	Fanout float64
	// Lost and Dup count deliveries missing or repeated over both loads.
	Lost, Dup int
	// Retries counts connection attempts that failed and were retried.
	Retries int
	// Rounds is how many runs the figures are the medians of (0 or 1:
	// one run).
	Rounds int
	// CPU is the broker's CPU time (user and system) per operation in
	// each load, and ClientCPU this process's: the rates are the pair's
	// on a machine they share, these say which side spent what.
	CPU, ClientCPU Costs
	Err            error
}

// Costs are CPU microseconds per session set up, per delivery (spread and
// fan-out) and per session reconnected.
type Costs struct {
	Setup, Spread, Fanout, Reconnect float64
}

// meter measures the CPU time the broker process and this one spend on
// one load.
type meter struct {
	pid           int
	broker, local time.Duration
}

func startMeter(pid int) meter {
	return meter{pid: pid, broker: proc.CPU(pid), local: proc.SelfCPU()}
}

// per returns the broker's and this process's CPU µs per operation since
// the meter started.
func (m meter) per(ops int) (broker, local float64) {
	if ops <= 0 {
		return 0, 0
	}
	b, l := proc.CPU(m.pid)-m.broker, proc.SelfCPU()-m.local
	return float64(b.Microseconds()) / float64(ops), float64(l.Microseconds()) / float64(ops)
}

// Config is one run.
type Config struct {
	Brokers  []Broker
	Sessions []int
	// FanoutMessages is how many messages go to every device (default 20).
	FanoutMessages int
	// SpreadMessages is the fewest messages the spread load sends
	// (default DefaultSpreadMessages): each device gets as many rounds of
	// one message as make at least that many.
	SpreadMessages int
	// Rounds is how many times each broker is measured at each size
	// (default 1), the brokers in turn within a round; a Result then
	// holds the median of each figure over the rounds (see mergeRounds).
	Rounds int
	// Dir holds the brokers' data; Progress, if set, is told each step.
	Dir      string
	Progress func(string)
}

// Run measures every broker at every fleet size, one broker process at a
// time.
func Run(ctx context.Context, cfg Config) []Result {
	if cfg.FanoutMessages <= 0 {
		cfg.FanoutMessages = 20
	}
	if cfg.SpreadMessages <= 0 {
		cfg.SpreadMessages = DefaultSpreadMessages
	}
	say := cfg.Progress
	if say == nil {
		say = func(string) {}
	}
	rounds := max(cfg.Rounds, 1)
	var out []Result
	for _, n := range cfg.Sessions {
		per := make([][]Result, len(cfg.Brokers))
		for round := range rounds {
			for i, b := range cfg.Brokers {
				step := fmt.Sprintf("%s, %d sessions", b.Name, n)
				if rounds > 1 {
					step += fmt.Sprintf(" (round %d of %d)", round+1, rounds)
				}
				say(step)
				dir := filepath.Join(cfg.Dir, fmt.Sprintf("%d-%d-%d", n, i, round))
				r := runOne(ctx, b, n, cfg.FanoutMessages, spreadRounds(n, cfg.SpreadMessages), dir, say)
				r.Broker, r.Sessions = b.Name, n
				per[i] = append(per[i], r)
			}
		}
		for _, rs := range per {
			out = append(out, mergeRounds(rs))
		}
	}
	return out
}

// mergeRounds makes one Result of a broker's rounds at one size: each
// rate, memory figure, latency and CPU cost is the median of the rounds'
// (each taken on its own), the timeline the median spread round's, and
// losses, duplicates and retries add up, so one in any round shows. A
// round that failed fails the Result.
func mergeRounds(rs []Result) Result {
	if len(rs) == 1 {
		return rs[0]
	}
	m := rs[0]
	m.Rounds = len(rs)
	m.Lost, m.Dup, m.Retries, m.Err = 0, 0, 0, nil
	for k, r := range rs {
		m.Lost += r.Lost
		m.Dup += r.Dup
		m.Retries += r.Retries
		if r.Err != nil && m.Err == nil {
			m.Err = fmt.Errorf("round %d of %d: %w", k+1, len(rs), r.Err)
		}
	}
	med := func(f func(Result) float64) float64 {
		vs := make([]float64, len(rs))
		for i, r := range rs {
			vs[i] = f(r)
		}
		slices.Sort(vs)
		return vs[(len(vs)-1)/2]
	}
	m.SetupRate = med(func(r Result) float64 { return r.SetupRate })
	m.ReconnectRate = med(func(r Result) float64 { return r.ReconnectRate })
	m.Spread = med(func(r Result) float64 { return r.Spread })
	m.Fanout = med(func(r Result) float64 { return r.Fanout })
	m.RSS = int64(med(func(r Result) float64 { return float64(r.RSS) }))
	m.PerSession = int64(med(func(r Result) float64 { return float64(r.PerSession) }))
	m.P50 = time.Duration(med(func(r Result) float64 { return float64(r.P50) }))
	m.P99 = time.Duration(med(func(r Result) float64 { return float64(r.P99) }))
	for _, r := range rs {
		if r.Spread == m.Spread {
			m.Timeline = r.Timeline
			break
		}
	}
	costs := func(get func(Result) Costs) Costs {
		return Costs{
			Setup:     med(func(r Result) float64 { return get(r).Setup }),
			Spread:    med(func(r Result) float64 { return get(r).Spread }),
			Fanout:    med(func(r Result) float64 { return get(r).Fanout }),
			Reconnect: med(func(r Result) float64 { return get(r).Reconnect }),
		}
	}
	m.CPU = costs(func(r Result) Costs { return r.CPU })
	m.ClientCPU = costs(func(r Result) Costs { return r.ClientCPU })
	return m
}

func runOne(ctx context.Context, b Broker, n, fan, rounds int, dir string, say func(string)) (r Result) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		r.Err = err
		return r
	}
	defer os.RemoveAll(dir)
	defer func() {
		// A failure says what the broker last logged.
		if r.Err != nil {
			if b, err := os.ReadFile(filepath.Join(dir, "broker.log")); err == nil && len(b) > 0 {
				r.Err = fmt.Errorf("%w (broker log: %s)", r.Err, lastLines(string(b), 3))
			}
		}
	}()
	port, err := freeport.Port()
	if err != nil {
		r.Err = err
		return r
	}
	addr, pid, stop, err := b.Start(ctx, dir, port)
	if err != nil {
		r.Err = err
		return r
	}
	defer func() { _ = stop() }()
	time.Sleep(300 * time.Millisecond)
	base := rss(pid)
	f := &fleet{addr: addr, devs: make([]*device, n)}
	for i := range f.devs {
		f.devs[i] = &device{id: fmt.Sprintf("fleet-%06d", i), topic: fmt.Sprintf("fleet/dev/%d", i), src: sourceFor(addr, i)}
	}
	defer f.closeAll()
	start, cpu := time.Now(), startMeter(pid)
	if err := f.connectAll(ctx, true); err != nil {
		r.Err = fmt.Errorf("set up: %w", err)
		return r
	}
	r.SetupRate = float64(n) / time.Since(start).Seconds()
	r.CPU.Setup, r.ClientCPU.Setup = cpu.per(n)
	say(fmt.Sprintf("  %d sessions set up at %.0f/s", n, r.SetupRate))
	time.Sleep(time.Second)
	r.RSS = rss(pid)
	r.PerSession = (r.RSS - base) / int64(n)

	// Spread: a message per device in each round, from 4 pipelined
	// publishers.
	r.SpreadRounds = rounds
	start, cpu = time.Now(), startMeter(pid)
	if err := f.publish(ctx, n*rounds, func(k int) string { return f.devs[k%n].topic }); err != nil {
		r.Err = fmt.Errorf("spread: %w", err)
		return r
	}
	samples, last := f.wait(ctx, rounds, start)
	r.CPU.Spread, r.ClientCPU.Spread = cpu.per(n * rounds)
	// Deliveries made, not sent: a broker that loses some is not
	// credited with them.
	r.Spread = float64(len(samples)) / last.Sub(start).Seconds()
	lat := make([]time.Duration, len(samples))
	for i, s := range samples {
		lat[i] = s.lat
	}
	r.P50, r.P99 = percentile(lat, 0.50), percentile(lat, 0.99)
	r.Timeline = timeline(samples, start, timelineStep)
	say(fmt.Sprintf("  spread: %.0f deliveries/s, p50 %v, p99 %v", r.Spread, r.P50, r.P99))

	// Fan-out: every device gets each message.
	start, cpu = time.Now(), startMeter(pid)
	if err := f.publish(ctx, fan, func(int) string { return "fleet/all" }); err != nil {
		r.Err = fmt.Errorf("fan-out: %w", err)
		return r
	}
	samples, last = f.wait(ctx, rounds+fan, start)
	r.CPU.Fanout, r.ClientCPU.Fanout = cpu.per(n * fan)
	r.Fanout = float64(len(samples)) / last.Sub(start).Seconds()
	say(fmt.Sprintf("  fan-out: %.0f deliveries/s", r.Fanout))

	// Reconnect storm, once the broker has finished with the fleet that
	// dropped: its teardown is not the reconnects' cost.
	f.closeAll()
	time.Sleep(time.Second)
	if d := waitIdle(pid, 30*time.Second); d > 0 {
		say(fmt.Sprintf("  the broker was still busy with the drop: %v more before the reconnects", d.Round(time.Millisecond)))
	}
	start, cpu = time.Now(), startMeter(pid)
	if err := f.connectAll(ctx, false); err != nil {
		r.Err = fmt.Errorf("reconnect: %w", err)
		return r
	}
	r.ReconnectRate = float64(n) / time.Since(start).Seconds()
	r.CPU.Reconnect, r.ClientCPU.Reconnect = cpu.per(n)
	time.Sleep(500 * time.Millisecond) // redeliveries of anything unacknowledged at the drop
	r.Lost, r.Dup = f.check(rounds + fan)
	r.Retries = int(f.retries.Load())
	if e := f.firstRetry.Load(); e != nil {
		say(fmt.Sprintf("  %d connection attempts retried, the first after: %v", r.Retries, *e))
	}
	return r
}

// waitIdle waits, at most max, until process pid spends less than 5% of
// a core over 200 ms, and returns how long it waited past the first 200
// ms (0: idle at once).
func waitIdle(pid int, max time.Duration) time.Duration {
	const step = 200 * time.Millisecond
	start := time.Now()
	last := proc.CPU(pid)
	for i := 0; time.Since(start) < max; i++ {
		time.Sleep(step)
		now := proc.CPU(pid)
		if now-last < step/20 {
			if i == 0 {
				return 0
			}
			return time.Since(start) - step
		}
		last = now
	}
	return max
}

// DefaultSpreadMessages is the fewest messages the spread load sends by
// default: a fleet smaller than that gets several rounds of one message
// per device, so that every fleet size is measured over a load of about
// the same length rather than a small fleet's over a burst the
// publishers' start and the last stragglers take most of. At this many
// the load lasts under a second, less than a Tidemark session waits
// before it writes its checkpoint; a load of several seconds measures
// those writes too, as a sustained load over a fleet has them.
const DefaultSpreadMessages = 10000

// spreadRounds is how many messages each of n devices gets in a spread
// load of at least least messages.
func spreadRounds(n, least int) int { return max(1, (least+n-1)/n) }

// fleet is the client side: one connection per device.
type fleet struct {
	addr    string
	devs    []*device
	readers pollers
	retries atomic.Int64 // connection attempts that failed and were retried
	// firstRetry is the error of the first attempt retried.
	firstRetry atomic.Pointer[error]
}

func (f *fleet) connectAll(ctx context.Context, subscribe bool) error {
	var wg sync.WaitGroup
	var first atomic.Pointer[error]
	next := atomic.Int64{}
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(f.devs) || first.Load() != nil || ctx.Err() != nil {
					return
				}
				// A device whose attempt fails tries again, as a real one
				// would, backing off from 100 ms to 6.4 s: during a
				// reconnect storm the broker may still hold the sockets of
				// the fleet that dropped, up to its connection cap.
				var err error
				for try := range 8 {
					if err = f.devs[i].connect(&f.readers, f.addr, subscribe); err == nil {
						break
					}
					if f.retries.Add(1) == 1 {
						first := err
						f.firstRetry.Store(&first)
					}
					time.Sleep(100 * time.Millisecond << try)
				}
				if err != nil {
					err = fmt.Errorf("%s: %w", f.devs[i].id, err)
					first.CompareAndSwap(nil, &err)
				}
			}
		}()
	}
	wg.Wait()
	if p := first.Load(); p != nil {
		return *p
	}
	return ctx.Err()
}

// msgNum numbers messages across a run, so spread and fan-out never share one.
var msgNum atomic.Uint64

// publish sends m QoS 1 messages, message k to topic(k), from 4
// connections with 64 unacknowledged each.
func (f *fleet) publish(ctx context.Context, m int, topic func(k int) string) error {
	const pubs, window = 4, 64
	var wg sync.WaitGroup
	errs := make(chan error, pubs)
	for p := range pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := publishFrom(ctx, f.addr, fmt.Sprintf("fleet-pub-%d", p), p, pubs, m, window, topic); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func publishFrom(ctx context.Context, addr, id string, first, step, m, window int, topic func(int) string) error {
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return err
	}
	defer nc.Close()
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Now()) })
	defer stop()
	out, _ := (&packet.Connect{Version: packet.V311, ClientID: id, CleanStart: true}).Append(nil, packet.V311)
	if _, err := nc.Write(out); err != nil {
		return err
	}
	rd := packet.NewReader(bufio.NewReader(nc), 0)
	rd.SetVersion(packet.V311)
	if _, err := rd.ReadPacket(); err != nil {
		return fmt.Errorf("CONNACK: %w", err)
	}
	acked := make(chan error, 1)
	inflight := make(chan struct{}, window)
	go func() {
		for k := first; k < m; k += step {
			p, err := rd.ReadPacket()
			if err != nil {
				acked <- err
				return
			}
			if _, ok := p.(*packet.Puback); !ok {
				acked <- fmt.Errorf("got %v, want PUBACK", p)
				return
			}
			<-inflight
		}
		acked <- nil
	}()
	payload := make([]byte, 64)
	pi := uint16(0)
	for k := first; k < m; k += step {
		inflight <- struct{}{}
		pi = pi%60000 + 1
		binary.BigEndian.PutUint64(payload, uint64(time.Now().UnixNano()))
		binary.BigEndian.PutUint64(payload[8:], msgNum.Add(1))
		out, _ = (&packet.Publish{Topic: topic(k), QoS: 1, PacketID: pi, Payload: payload}).Append(out[:0], packet.V311)
		if _, err := nc.Write(out); err != nil {
			return err
		}
	}
	return <-acked
}

// wait waits until every device has want distinct messages (or 2 minutes
// without progress) and returns the first deliveries of all (when each was
// published, and its latency) and the last arrival.
func (f *fleet) wait(ctx context.Context, want int, since time.Time) ([]sample, time.Time) {
	lastProgress, lastTotal := time.Now(), int64(-1)
	for ctx.Err() == nil {
		total, done := int64(0), true
		for _, d := range f.devs {
			c := d.count.Load()
			total += c
			if c < int64(want) {
				done = false
			}
		}
		if done || time.Since(lastProgress) > stallLimit {
			break
		}
		if total != lastTotal {
			lastTotal, lastProgress = total, time.Now()
		}
		time.Sleep(2 * time.Millisecond)
	}
	var lat []sample
	last := since
	for _, d := range f.devs {
		d.mu.Lock()
		lat = append(lat, d.lat...)
		d.lat = d.lat[:0]
		if d.last.After(last) {
			last = d.last
		}
		d.mu.Unlock()
	}
	return lat, last
}

// stallLimit is how long a load waits with no delivery anywhere in the
// fleet before it ends: what has not arrived by then counts as lost. A
// broker that works delivers something every few milliseconds.
const stallLimit = 15 * time.Second

// check counts, over every device, the messages it missed of the want it
// should have and the repeated deliveries.
func (f *fleet) check(want int) (lost, dup int) {
	for _, d := range f.devs {
		d.mu.Lock()
		lost += max(0, want-len(d.seen))
		for _, c := range d.seen {
			dup += c - 1
		}
		d.mu.Unlock()
	}
	return lost, dup
}

func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// rss reads a process's resident set size in bytes from /proc.
func rss(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// ErrNoBroker is returned when no broker was selected.
var ErrNoBroker = errors.New("fleet: no broker to measure")

// Table renders results as a table, one row per broker and fleet size,
// with each Tidemark figure's ratio to mosquitto's at the same size where
// mosquitto was measured.
func Table(rs []Result) string {
	var b strings.Builder
	base := map[int]Result{}
	for _, r := range rs {
		if r.Broker == "mosquitto" && r.Err == nil {
			base[r.Sessions] = r
		}
	}
	fmt.Fprintf(&b, "| broker | sessions | setup/s | RSS MB | KB/session | spread deliveries/s | p50 | p99 | fan-out deliveries/s | reconnect/s | retries | lost | dup |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	ratio := func(v, m float64, higher bool) string {
		if m == 0 || v == 0 {
			return ""
		}
		if !higher {
			return fmt.Sprintf(" (%.2fx)", m/v)
		}
		return fmt.Sprintf(" (%.2fx)", v/m)
	}
	for _, r := range rs {
		if r.Err != nil {
			fmt.Fprintf(&b, "| %s | %d | failed: %v |\n", r.Broker, r.Sessions, r.Err)
			continue
		}
		m, ok := base[r.Sessions]
		if !ok || r.Broker == "mosquitto" {
			m = Result{}
		}
		fmt.Fprintf(&b, "| %s | %d | %.0f%s | %.1f | %.1f | %.0f%s | %s | %s | %.0f%s | %.0f%s | %d | %d | %d |\n",
			r.Broker, r.Sessions, r.SetupRate, ratio(r.SetupRate, m.SetupRate, true),
			float64(r.RSS)/(1<<20), float64(r.PerSession)/1024,
			r.Spread, ratio(r.Spread, m.Spread, true), r.P50.Round(10*time.Microsecond), r.P99.Round(10*time.Microsecond),
			r.Fanout, ratio(r.Fanout, m.Fanout, true), r.ReconnectRate, ratio(r.ReconnectRate, m.ReconnectRate, true), r.Retries, r.Lost, r.Dup)
	}
	b.WriteString("\nRatios in brackets are against mosquitto at the same fleet size (higher is better).\n")
	if len(rs) > 0 && rs[0].Rounds > 1 {
		fmt.Fprintf(&b, "Each figure is the median of %d rounds, the brokers taken in turn within each round; lost, dup and retries add up over the rounds.\n", rs[0].Rounds)
	}
	b.WriteString("\nCPU µs per operation, broker / client (the load generator, this process):\n\n")
	fmt.Fprintf(&b, "| broker | sessions | setup | spread delivery | fan-out delivery | reconnect |\n|---|---|---|---|---|---|\n")
	for _, r := range rs {
		if r.Err != nil {
			continue
		}
		cell := func(v, c float64) string { return fmt.Sprintf("%.1f / %.1f", v, c) }
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s |\n", r.Broker, r.Sessions,
			cell(r.CPU.Setup, r.ClientCPU.Setup), cell(r.CPU.Spread, r.ClientCPU.Spread),
			cell(r.CPU.Fanout, r.ClientCPU.Fanout), cell(r.CPU.Reconnect, r.ClientCPU.Reconnect))
	}
	return b.String()
}
