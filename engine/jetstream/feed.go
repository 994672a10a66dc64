//go:build !nojetstream

package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// feed owns the index consumer: it creates it, watches that it moves
// while the stream has messages it has not brought, and recreates it when
// it does not. An ordered consumer recreates itself when its server goes
// away, but one created during a leader change can sit on a consumer the
// new leader never serves: no error, no heartbeat gap the client acts on,
// and the index (and every read and load waiting on it) stands still.
//
// Each consumer the feed creates has a generation; the view applies only
// messages of the current one, so a consumer being replaced cannot
// interleave its messages with its successor's.
type feed struct {
	d *db

	mu   sync.Mutex // guards cc and cons; held while replacing them
	cc   jetstream.ConsumeContext
	cons jetstream.Consumer
	// replacing serializes replace: the watchdog and opening both call
	// it, and two at once would leave one new consumer running unowned.
	replacing sync.Mutex

	// loading is set while opening waits for the index to catch up with
	// the stream: the watchdog then acts after loadStall, not stallAfter.
	loading atomic.Bool

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// defaultStallAfter is how long the index may stand still, while the
// consumer has messages to bring, before the consumer is recreated. It is
// several heartbeat periods, so a consumer the client is already
// recreating is left to finish.
const defaultStallAfter = 5 * time.Second

// minLoadStall bounds loadStall from below: the first messages of a new
// consumer on a busy cluster can take a moment.
const minLoadStall = 2 * time.Second

// loadStall is how long the consumer may deliver nothing while opening
// waits for the index. A consumer placed on a replica that is still
// catching up with the stream (a server just restarted) delivers what that
// replica holds and then nothing, with no error, until the replica has
// caught up: tens of seconds on a large stream, all of which a node
// taking over from a failed one would otherwise spend unable to serve.
// A replacement is placed afresh, usually where the stream is current.
func loadStall(stallAfter time.Duration) time.Duration {
	return max(stallAfter/3, minLoadStall)
}

// startFeed creates the index consumer and its watchdog.
func (d *db) startFeed(ctx context.Context) error {
	f := &feed{d: d, stop: make(chan struct{}), done: make(chan struct{})}
	f.loading.Store(true)
	if err := f.create(ctx); err != nil {
		return err
	}
	d.feed = f
	go f.watch()
	return nil
}

// create starts a consumer of a new generation, delivering the last
// message of every subject and then everything new.
func (f *feed) create(ctx context.Context) error {
	d := f.d
	return d.request(ctx, "start the index consumer on "+d.name, createTimeout, func(ctx context.Context) error {
		cons, err := d.st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{d.name + ".>"},
			DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
		})
		if err != nil {
			return err
		}
		gen := d.view.nextGen()
		// Short pulls with frequent heartbeats: when the server holding
		// the consumer goes away (a cluster node fails over), the ordered
		// consumer notices within seconds and recreates itself where the
		// stream lives.
		cc, err := cons.Consume(func(m jetstream.Msg) { d.onMsg(gen, m) },
			jetstream.PullExpiry(consumerExpiry),
			jetstream.PullHeartbeat(consumerExpiry/4),
			jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
				// The index stands still until the consumer is back:
				// operators see why.
				d.log.Warn("index consumer", "stream", d.name, "err", err)
			}))
		if err != nil {
			return err
		}
		f.mu.Lock()
		f.cc, f.cons = cc, cons
		f.mu.Unlock()
		return nil
	})
}

// watch recreates the consumer when it delivered nothing for stallAfter
// (loadStall while opening) while it had messages to bring, or could not
// be found. Progress is any message of the current consumer, applied or
// not: a replacement first brings again what the index holds, and must
// not be taken for stalled while it does.
func (f *feed) watch() {
	defer close(f.done)
	d := f.d
	t := time.NewTicker(min(d.stallAfter, loadStall(d.stallAfter)) / 3)
	defer t.Stop()
	last, closed := d.view.progress()
	moved, placed := time.Now(), time.Now()
	for !closed {
		select {
		case <-f.stop:
			return
		case <-t.C:
		}
		var now uint64
		now, closed = d.view.progress()
		if !f.loading.Load() && time.Since(placed) >= d.stallAfter {
			// A consumer the client recreated after its server went
			// away may sit on a replica still catching up: it moves,
			// slowly, and the index lags the stream all that while.
			// (Opening checks this itself.)
			placed = time.Now()
			if ok, why, err := f.placedCurrent(context.Background(), false); err == nil && !ok {
				f.replaceBehind(why)
				last, _ = d.view.progress()
				moved = time.Now()
				continue
			}
		}
		if now != last {
			last, moved = now, time.Now()
			continue
		}
		limit := d.stallAfter
		if f.loading.Load() {
			limit = loadStall(d.stallAfter)
		}
		if time.Since(moved) < limit {
			continue
		}
		applied, _ := d.view.state()
		behind, why := true, "nothing delivered while opening, short of the stream's end"
		if !f.loading.Load() {
			// While opening, the index is short of the stream's end by
			// definition, and the consumer's own account can be wrong:
			// one on a replica still rebuilding its store reports
			// nothing pending past what that replica holds.
			behind, why = f.behind(applied)
		}
		if !behind {
			moved = time.Now()
			continue
		}
		d.log.Warn("the index consumer stands still; recreating it", "stream", d.name, "applied_seq", applied, "for", time.Since(moved).Round(time.Second), "why", why, "opening", f.loading.Load())
		f.replace()
		moved = time.Now()
	}
}

// behind asks the server whether the consumer has messages the index has
// not applied, and says why it thinks so.
func (f *feed) behind(applied uint64) (bool, string) {
	f.mu.Lock()
	cons := f.cons
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), attemptTimeout)
	defer cancel()
	info, err := cons.Info(ctx)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		return true, "the consumer is gone"
	case err != nil:
		// The server may be unreachable; the connection's own handlers
		// say so. Ask the stream instead.
		sctx, scancel := context.WithTimeout(context.Background(), attemptTimeout)
		defer scancel()
		si, serr := f.d.st.Info(sctx)
		if serr != nil {
			return false, ""
		}
		return si.State.LastSeq > applied && si.State.Msgs > 0, "consumer info failed: " + err.Error()
	case info.NumPending > 0:
		return true, "messages pending"
	case info.Delivered.Stream > applied:
		return true, "delivered but not applied"
	}
	// Nothing pending where the consumer is: that server may be one
	// still catching up with the stream.
	if ok, why, err := f.placedCurrent(context.Background(), true); err == nil && !ok {
		return true, why
	}
	// The leader has more than the index, for longer than a message
	// just committed takes to arrive.
	last, found, err := f.leaderLast(context.Background())
	if err != nil {
		f.d.log.Info("index consumer: no answer from the stream leader about its newest message", "stream", f.d.name, "err", err)
	}
	if err == nil && found && last > applied {
		time.Sleep(leaderRecheck)
		if now, _ := f.d.view.state(); now < last {
			return true, fmt.Sprintf("the stream leader has sequence %d, the consumer brought none past %d", last, now)
		}
	}
	return false, ""
}

// leaderRecheck is how long behind waits, having found the leader ahead
// of the index, before it counts the consumer stuck: long enough for a
// message committed at that moment to arrive.
const leaderRecheck = 250 * time.Millisecond

// placedCurrent reports whether the consumer's server holds the whole
// stream: it leads the stream, or it is a replica the leader counts as
// current with no lag (exact), or, not exact, one up and fewer than
// laggingReplica entries behind; why says what it found otherwise.
// A server that has just restarted catches up with the stream for a
// while, and a consumer placed there meanwhile sees only what it has,
// with no error. Without cluster information (a single server) the
// answer is yes. A healthy replica under load lags by the entries in
// flight: only a consumer that found nothing pending asks for exact. An
// error means the question could not be asked, not that the answer is no.
func (f *feed) placedCurrent(ctx context.Context, exact bool) (bool, string, error) {
	at, si, err := f.placement(ctx)
	if err != nil {
		return false, "", err
	}
	if at == "" || si.Cluster == nil || si.Cluster.Leader == at {
		return true, "", nil
	}
	for _, p := range si.Cluster.Replicas {
		if p.Name != at {
			continue
		}
		if !p.Offline && (p.Current && p.Lag == 0 || !exact && p.Lag < laggingReplica) {
			return true, "", nil
		}
		return false, fmt.Sprintf("consumer on %s, which the stream leader %s counts %s, %d behind", at, si.Cluster.Leader, map[bool]string{true: "current", false: "not current"}[p.Current], p.Lag), nil
	}
	return false, fmt.Sprintf("consumer on %s, not among the stream's servers (leader %s)", at, si.Cluster.Leader), nil
}

// placement returns the server running the consumer ("" without cluster
// information) and the stream's info, which its leader gives.
func (f *feed) placement(ctx context.Context) (at string, si *jetstream.StreamInfo, err error) {
	f.mu.Lock()
	cons := f.cons
	f.mu.Unlock()
	actx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	ci, err := cons.Info(actx)
	if err != nil {
		f.d.log.Info("index consumer: no answer about its placement", "stream", f.d.name, "err", err)
		return "", nil, fmt.Errorf("consumer info: %w", err)
	}
	if ci.Cluster == nil || ci.Cluster.Leader == "" {
		return "", nil, nil
	}
	if si, err = f.d.st.Info(actx); err != nil {
		return "", nil, fmt.Errorf("stream info: %w", err)
	}
	return ci.Cluster.Leader, si, nil
}

// replaceBehind recreates the consumer found on a server behind the
// stream, saying why.
func (f *feed) replaceBehind(why string) {
	f.d.log.Warn("the index consumer is on a server behind the stream; recreating it", "stream", f.d.name, "why", why)
	f.replace()
}

// laggingReplica is the lag, in the stream's log entries, at which a
// replica counts as behind when placedCurrent is not exact. The leader
// reports a follower outside the quorum of each commit as not current,
// some entries behind, all the time under load; one catching up after a
// restart is thousands behind.
const laggingReplica = 1024

// maxPlacements bounds how often opening recreates the index consumer to
// get it onto the stream's leader (see placeOnLeader).
const maxPlacements = 6

// placeOnLeader recreates the index consumer until it runs on the
// stream's leader, at most maxPlacements times. The server picks where
// a consumer runs, among the stream's servers; a replica that restarted
// a moment ago can count as current while it still rebuilds its store,
// and a consumer there brings the stream as slowly as the replica gets
// it (a node opening took 17 s to 55 s so). The leader has it all.
func (f *feed) placeOnLeader(ctx context.Context) {
	for try := 1; try <= maxPlacements && ctx.Err() == nil; try++ {
		at, si, err := f.placement(ctx)
		if err != nil || at == "" || si.Cluster == nil || si.Cluster.Leader == at {
			return
		}
		f.d.log.Info("index consumer on a replica; recreating it for the stream leader while opening", "stream", f.d.name, "on", at, "leader", si.Cluster.Leader, "try", try)
		f.replace()
	}
}

// leaderLast returns the sequence of the stream's newest message, as its
// leader has it (found false for an empty stream). It asks the stream
// API, which the leader answers, not a direct get, which any replica
// may answer from what it holds.
func (f *feed) leaderLast(ctx context.Context) (seq uint64, found bool, err error) {
	d := f.d
	req, _ := json.Marshal(map[string]string{"last_by_subj": d.name + ".>"})
	actx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	msg, err := d.nc.RequestWithContext(actx, "$JS.API.STREAM.MSG.GET."+d.name, req)
	if err != nil {
		return 0, false, err
	}
	var resp struct {
		Message *struct {
			Seq uint64 `json:"seq"`
		} `json:"message"`
		Error *struct {
			Code        int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return 0, false, fmt.Errorf("jetstream: last message of %s: %w", d.name, err)
	}
	switch {
	case resp.Error != nil && resp.Error.Code == errCodeNoMessage:
		return 0, false, nil
	case resp.Error != nil:
		return 0, false, fmt.Errorf("jetstream: last message of %s: %s (%d)", d.name, resp.Error.Description, resp.Error.Code)
	case resp.Message == nil:
		return 0, false, fmt.Errorf("jetstream: last message of %s: empty answer", d.name)
	}
	return resp.Message.Seq, true, nil
}

// replace stops the current consumer and creates one of a new
// generation, which starts over from the last message of every subject;
// the view skips what it applied already.
func (f *feed) replace() {
	f.replacing.Lock()
	defer f.replacing.Unlock()
	f.mu.Lock()
	old, oldCons := f.cc, f.cons
	f.mu.Unlock()
	if old != nil {
		old.Stop()
	}
	if oldCons != nil {
		if info := oldCons.CachedInfo(); info != nil {
			// Gone now rather than when the server expires it.
			go func(name string) {
				dctx, dcancel := context.WithTimeout(context.Background(), attemptTimeout)
				defer dcancel()
				_ = f.d.st.DeleteConsumer(dctx, name)
			}(info.Name)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-f.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := f.create(ctx); err != nil && ctx.Err() == nil {
		f.d.log.Warn("recreating the index consumer", "stream", f.d.name, "err", err)
	}
}

// close stops the watchdog and the consumer, and deletes the consumer on
// the server when ctx allows (del).
func (f *feed) close(ctx context.Context, del bool) {
	f.once.Do(func() { close(f.stop) })
	<-f.done
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cc != nil {
		f.cc.Stop()
		f.cc = nil
	}
	if !del || f.cons == nil {
		return
	}
	if info := f.cons.CachedInfo(); info != nil {
		if err := f.d.st.DeleteConsumer(ctx, info.Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			f.d.log.Debug("delete index consumer", "err", err)
		}
	}
}
