package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/table"
)

var commitLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name:    "tidemark_commit_duration_seconds",
	Help:    "Time from submitting an engine commit to its durable completion.",
	Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
}, []string{"engine"})

// instrumented wraps an engine to observe commit latency. Handles complete
// in submission order (the engine contract), so one goroutine waiting on
// them in order observes every commit without a goroutine per commit. A
// commit already complete when Submit returns (no sync to wait for) is
// observed at once: handing it over would wake that goroutine for every
// such commit, a scheduler round trip per message.
type instrumented struct {
	engine.Engine
	obs     prometheus.Observer
	pending chan observed
	once    sync.Once
}

type observed struct {
	h     *engine.Handle
	start time.Time
}

func instrument(e engine.Engine) engine.Engine {
	obs := commitLatency.WithLabelValues(e.Name())
	i := &instrumented{Engine: e, obs: obs, pending: make(chan observed, 8192)}
	go func() {
		for o := range i.pending {
			<-o.h.Done()
			obs.Observe(time.Since(o.start).Seconds())
		}
	}()
	return i
}

func (i *instrumented) Submit(ctx context.Context, b *engine.Batch) (*engine.Handle, error) {
	start := time.Now()
	h, err := i.Engine.Submit(ctx, b)
	if err != nil {
		return h, err
	}
	select {
	case <-h.Done():
		i.obs.Observe(time.Since(start).Seconds())
		return h, nil
	default:
	}
	select {
	case i.pending <- observed{h, start}:
	default: // the observer is behind: skip this sample rather than wait
	}
	return h, nil
}

// The wrapper passes every optional interface of the engine on: hidden
// behind it, a JetStream engine's atomic batch limit would read as
// engine.MaxBatchEntries and the broker would build commits the server
// refuses, and its preference for separate commits would be lost.
var (
	_ engine.HealthReporter  = (*instrumented)(nil)
	_ engine.CommitLimit     = (*instrumented)(nil)
	_ engine.SeparateCommits = (*instrumented)(nil)
)

// Health passes the wrapped engine's health on, so /healthz sees a store
// that refuses writes through the wrapper.
func (i *instrumented) Health() error { return engine.Health(i.Engine) }

// MaxCommitEntries passes the wrapped engine's atomic commit limit on.
func (i *instrumented) MaxCommitEntries() int { return engine.MaxCommitEntries(i.Engine) }

// PrefersSeparateCommits passes the wrapped engine's preference on.
func (i *instrumented) PrefersSeparateCommits() bool { return engine.PrefersSeparateCommits(i.Engine) }

// Get keeps the engine's point reads (engine.PointReader).
func (i *instrumented) Get(ctx context.Context, key []byte) ([]byte, error) {
	return engine.Get(ctx, i.Engine, key)
}

func (i *instrumented) Close() error {
	err := i.Engine.Close()
	i.once.Do(func() { close(i.pending) })
	return err
}

// serveMetrics serves /metrics and /healthz on addr until ctx ends.
func serveMetrics(ctx context.Context, log *slog.Logger, addr string, b *mqtt.Broker, parts *table.Partitions, engineName string) (func(), error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), commitLatency)
	reg.MustRegister(&brokerCollector{b: b, parts: parts, engine: engineName})
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	// A probe costs one point read, whatever the size of the log.
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		cctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := pingAll(cctx, parts); err != nil {
			http.Error(w, "engine unavailable: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	// Go's profiles, for an operator who finds the broker slow or large:
	// the listener is the operator's own, like /metrics.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener failed", "err", err)
		}
	}()
	log.Info("metrics listening", "addr", ln.Addr().String())
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}

// brokerCollector reads the broker's counters at scrape time; the log
// statistics are cached for a few seconds because some engines compute
// them by scanning.
type brokerCollector struct {
	b *mqtt.Broker
	// parts is the store; the log gauges sum its partitions' logs.
	parts  *table.Partitions
	engine string

	mu      sync.Mutex
	logAt   time.Time
	logStat engine.LogStats

	// Counting stored sessions reads every session record: with a million
	// offline sessions, seconds of work. A scrape reports the count last
	// taken, and starts a new one, in the background, when it is older
	// than sessionsEvery; only the first scrape counts at once.
	sessMu       sync.Mutex
	sessAt       time.Time
	sessCounting bool
	sessOn       int
	sessOff      int
	sessKnown    bool
}

// sessionsEvery is how often the stored sessions are counted at most.
const sessionsEvery = 30 * time.Second

// sessions returns the last count of stored sessions (ok false before the
// first completed) and starts the next when it is due.
func (c *brokerCollector) sessions(ctx context.Context) (online, offline int, ok bool) {
	c.sessMu.Lock()
	defer c.sessMu.Unlock()
	if !c.sessKnown && !c.sessCounting {
		on, off, err := c.b.SessionCounts(ctx)
		c.sessAt = time.Now()
		if err != nil {
			return 0, 0, false
		}
		c.sessOn, c.sessOff, c.sessKnown = on, off, true
		return on, off, true
	}
	if !c.sessCounting && time.Since(c.sessAt) > sessionsEvery {
		c.sessCounting = true
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			on, off, err := c.b.SessionCounts(ctx)
			cancel()
			c.sessMu.Lock()
			defer c.sessMu.Unlock()
			c.sessCounting, c.sessAt = false, time.Now()
			if err == nil {
				c.sessOn, c.sessOff, c.sessKnown = on, off, true
			}
		}()
	}
	return c.sessOn, c.sessOff, c.sessKnown
}

var (
	descConns    = prometheus.NewDesc("tidemark_connections", "Open MQTT connections (online sessions).", nil, nil)
	descSessions = prometheus.NewDesc("tidemark_sessions", "Stored sessions by state.", []string{"state"}, nil)
	descConnects = prometheus.NewDesc("tidemark_connects_total", "CONNECTs accepted.", nil, nil)
	descIn       = prometheus.NewDesc("tidemark_messages_in_total", "PUBLISHes received, by QoS.", []string{"qos"}, nil)
	descOut      = prometheus.NewDesc("tidemark_messages_out_total", "PUBLISHes sent, by QoS.", []string{"qos"}, nil)
	descBytesIn  = prometheus.NewDesc("tidemark_payload_bytes_in_total", "Application payload bytes received.", nil, nil)
	descBytesOut = prometheus.NewDesc("tidemark_payload_bytes_out_total", "Application payload bytes sent.", nil, nil)
	descDropped  = prometheus.NewDesc("tidemark_dropped_messages_total", "Messages not delivered, by reason.", []string{"reason"}, nil)
	descPipeline = prometheus.NewDesc("tidemark_ack_pipeline_depth", "Acknowledgements waiting for their commit, all connections.", nil, nil)
	descInflight = prometheus.NewDesc("tidemark_inflight_out", "QoS 1/2 PUBLISHes sent and not yet acknowledged by clients.", nil, nil)
	descLogN     = prometheus.NewDesc("tidemark_log_entries", "Entries in the retained change log.", []string{"engine"}, nil)
	descLogB     = prometheus.NewDesc("tidemark_log_bytes", "Bytes of the retained change log.", []string{"engine"}, nil)
	descTrunc    = prometheus.NewDesc("tidemark_retention_truncations_total", "Retention passes that removed log entries.", nil, nil)
	descReplays  = prometheus.NewDesc("tidemark_replays_total", "Subscriptions asking for a replay of the message log, by result: started, refused.", []string{"result"}, nil)
	descReplayed = prometheus.NewDesc("tidemark_replayed_messages_total", "Messages sent by replays.", nil, nil)
	descSharedQ  = prometheus.NewDesc("tidemark_shared_queued_messages_total", "Messages kept in a shared subscription group's queue while none of its members was online.", nil, nil)
	descTables   = prometheus.NewDesc("tidemark_table_topics_total", "Traffic of the tables namespace (--tables-prefix), by kind: write (PUBLISHes written to a table), delivery (records and changes sent to table subscriptions), refused (invalid table topics or filters).", []string{"kind"}, nil)
	descRuleMsgs = prometheus.NewDesc("tidemark_retention_rule_messages", "Messages of each --retention rule's filter that the rule keeps in the message log.", []string{"filter", "keep"}, nil)
	descRuleB    = prometheus.NewDesc("tidemark_retention_rule_bytes", "Stored bytes of the messages each --retention rule keeps.", []string{"filter", "keep"}, nil)
	descRuleAge  = prometheus.NewDesc("tidemark_retention_rule_oldest_age_seconds", "Age of the oldest message each --retention rule keeps (0 when it keeps none).", []string{"filter", "keep"}, nil)
	descSockets  = prometheus.NewDesc("tidemark_sockets", "Open MQTT sockets, by whether they have sent CONNECT.", []string{"state"}, nil)
	descRefused  = prometheus.NewDesc("tidemark_sockets_refused_total", "Sockets closed before their CONNECT was served, by reason.", []string{"reason"}, nil)
	descAcceptEr = prometheus.NewDesc("tidemark_accept_errors_total", "Failed Accepts, each retried after a pause.", nil, nil)
	descStoreErr = prometheus.NewDesc("tidemark_store_write_failures_total", "Commits the store refused because it could not write (full disk, failing write); each ended the connection that needed it.", nil, nil)
	descLimits   = prometheus.NewDesc("tidemark_limit_hits_total", "Packets or subscriptions refused by a configured limit, by limit.", []string{"limit"}, nil)
	descAuthRef  = prometheus.NewDesc("tidemark_auth_refused_total", "CONNECTs refused by authentication, by reason.", []string{"reason"}, nil)
	descDenied   = prometheus.NewDesc("tidemark_acl_denied_total", "Accesses the ACL refused, by kind: read, write, subscribe.", []string{"access"}, nil)
)

func (c *brokerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descConns, descSessions, descConnects, descIn, descOut, descBytesIn, descBytesOut, descDropped, descPipeline, descInflight, descLogN, descLogB, descTrunc, descReplays, descReplayed, descSharedQ, descTables, descRuleMsgs, descRuleB, descRuleAge, descSockets, descRefused, descAcceptEr, descStoreErr, descLimits, descAuthRef, descDenied} {
		ch <- d
	}
}

func (c *brokerCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.b.Stats()
	ch <- prometheus.MustNewConstMetric(descConns, prometheus.GaugeValue, float64(s.ConnectionsOnline))
	ch <- prometheus.MustNewConstMetric(descConnects, prometheus.CounterValue, float64(s.Connects))
	for q := range 3 {
		ch <- prometheus.MustNewConstMetric(descIn, prometheus.CounterValue, float64(s.MessagesIn[q]), strconv.Itoa(q))
		ch <- prometheus.MustNewConstMetric(descOut, prometheus.CounterValue, float64(s.MessagesOut[q]), strconv.Itoa(q))
	}
	ch <- prometheus.MustNewConstMetric(descBytesIn, prometheus.CounterValue, float64(s.BytesIn))
	ch <- prometheus.MustNewConstMetric(descBytesOut, prometheus.CounterValue, float64(s.BytesOut))
	for reason, n := range s.Dropped {
		ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(n), reason)
	}
	ch <- prometheus.MustNewConstMetric(descPipeline, prometheus.GaugeValue, float64(s.PipelineDepth))
	ch <- prometheus.MustNewConstMetric(descInflight, prometheus.GaugeValue, float64(s.InflightOut))
	ch <- prometheus.MustNewConstMetric(descTrunc, prometheus.CounterValue, float64(s.Truncations))
	for result, n := range s.Replays {
		ch <- prometheus.MustNewConstMetric(descReplays, prometheus.CounterValue, float64(n), result)
	}
	ch <- prometheus.MustNewConstMetric(descReplayed, prometheus.CounterValue, float64(s.MessagesReplayed))
	ch <- prometheus.MustNewConstMetric(descSharedQ, prometheus.CounterValue, float64(s.SharedQueued))
	ch <- prometheus.MustNewConstMetric(descTables, prometheus.CounterValue, float64(s.TableWrites), "write")
	ch <- prometheus.MustNewConstMetric(descTables, prometheus.CounterValue, float64(s.TableDeliveries), "delivery")
	ch <- prometheus.MustNewConstMetric(descTables, prometheus.CounterValue, float64(s.TableRefused), "refused")
	for _, r := range s.Retention {
		ch <- prometheus.MustNewConstMetric(descRuleMsgs, prometheus.GaugeValue, float64(r.Messages), r.Rule.Filter, r.Rule.Amount())
		ch <- prometheus.MustNewConstMetric(descRuleB, prometheus.GaugeValue, float64(r.Bytes), r.Rule.Filter, r.Rule.Amount())
		age := 0.0
		if !r.Oldest.IsZero() {
			age = time.Since(r.Oldest).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(descRuleAge, prometheus.GaugeValue, age, r.Rule.Filter, r.Rule.Amount())
	}
	ch <- prometheus.MustNewConstMetric(descSockets, prometheus.GaugeValue, float64(s.AwaitingConnect), "awaiting_connect")
	ch <- prometheus.MustNewConstMetric(descSockets, prometheus.GaugeValue, float64(s.Sockets-s.AwaitingConnect), "connected")
	for reason, n := range s.Refused {
		ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(n), reason)
	}
	ch <- prometheus.MustNewConstMetric(descAcceptEr, prometheus.CounterValue, float64(s.AcceptErrors))
	ch <- prometheus.MustNewConstMetric(descStoreErr, prometheus.CounterValue, float64(s.StoreFailures))
	for limit, n := range s.LimitHits {
		ch <- prometheus.MustNewConstMetric(descLimits, prometheus.CounterValue, float64(n), limit)
	}
	for reason, n := range s.AuthRefused {
		ch <- prometheus.MustNewConstMetric(descAuthRef, prometheus.CounterValue, float64(n), reason)
	}
	for access, n := range s.Denied {
		ch <- prometheus.MustNewConstMetric(descDenied, prometheus.CounterValue, float64(n), access)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if on, off, ok := c.sessions(ctx); ok {
		ch <- prometheus.MustNewConstMetric(descSessions, prometheus.GaugeValue, float64(on), "online")
		ch <- prometheus.MustNewConstMetric(descSessions, prometheus.GaugeValue, float64(off), "offline")
	}
	c.mu.Lock()
	if time.Since(c.logAt) > 5*time.Second {
		if st, err := logStatsOf(ctx, c.parts); err == nil {
			c.logStat, c.logAt = st, time.Now()
		}
	}
	st := c.logStat
	c.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descLogN, prometheus.GaugeValue, float64(st.Entries), c.engine)
	ch <- prometheus.MustNewConstMetric(descLogB, prometheus.GaugeValue, float64(st.Bytes), c.engine)
}

// pingAll pings every partition's engine: a probe fails when any of the
// logs a node writes to does not answer.
func pingAll(ctx context.Context, parts *table.Partitions) error {
	for i := range parts.Count() {
		if err := parts.DB(i).Ping(ctx); err != nil {
			if parts.Count() > 1 {
				return fmt.Errorf("partition %d: %w", i, err)
			}
			return err
		}
	}
	return nil
}

// logStatsOf returns the entries and bytes of every partition's log
// together.
func logStatsOf(ctx context.Context, parts *table.Partitions) (engine.LogStats, error) {
	var sum engine.LogStats
	for i := range parts.Count() {
		st, err := parts.DB(i).LogStats(ctx)
		if err != nil {
			return engine.LogStats{}, err
		}
		if i == 0 {
			sum = st
			continue
		}
		sum.Entries += st.Entries
		sum.Bytes += st.Bytes
	}
	return sum, nil
}
