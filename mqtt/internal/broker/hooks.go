package broker

import "time"

// Hooks are fault-injection points in the broker's QoS 1 and 2 paths: the
// conformance suite crashes a broker process at a named point, holds or
// delays a kind of commit, and fails one. The broker calls them only in a
// build with tag faults (HooksEnabled); in any other build they are never
// called and the calls are not compiled in. Hooks run on the broker goroutine that reached the point,
// with no broker lock held; they may block it or end the process.
type Hooks struct {
	// At is called at each named point (the Point constants) with the
	// client id and packet identifier involved.
	At func(p Point, client string, pi uint16)
	// Submit is called right before the broker submits a commit of kind k
	// for client. Blocking holds the commit itself and the goroutine that
	// submits it (for inbound commits, the connection's read loop).
	Submit func(k Kind, client string)
	// Ack is called by a connection's ack loop before it waits for a
	// commit of kind k. The commit then counts as complete only once hold
	// (if not nil) is closed as well, still bounded by
	// Options.StoreTimeout: a stalled or slow store, as the pipeline sees
	// it. A non-nil err replaces the commit's result: a store failure.
	Ack func(k Kind, client string) (hold <-chan struct{}, err error)
}

// Point names a place in the QoS 2 path where Hooks.At is called.
type Point string

// The named points.
const (
	// PointPubrecSent: a PUBREC for an inbound QoS 2 PUBLISH was written
	// and flushed; the message is staged durably.
	PointPubrecSent Point = "after-pubrec-sent"
	// PointPubrelRead: a PUBREL was read, nothing done for it yet.
	PointPubrelRead Point = "after-pubrel-read"
	// PointReleaseCommitted: the release commit (message log append,
	// staged copy removed) is durable; the PUBCOMP is not written yet.
	// Subscribers may already be receiving the message.
	PointReleaseCommitted Point = "after-release-committed"
	// PointPubcompSent: the PUBCOMP was written and flushed.
	PointPubcompSent Point = "after-pubcomp-sent"
	// PointStagedLoad: a PUBREL found no copy on the connection and read
	// the staged message from the store.
	PointStagedLoad Point = "after-staged-load"
	// PointDelivered: a PUBLISH to a subscriber was written (pi is 0 for
	// QoS 0); client is the subscriber.
	PointDelivered Point = "after-deliver"
	// PointSessionRead: a CONNECT read its present session's record and
	// not yet the rows beside it (pi is 0).
	PointSessionRead Point = "after-session-read"
	// PointParked: the read loop let go of what an idle connection does
	// not hold and is about to park the connection (pi is 0); called on
	// the read loop's goroutine.
	PointParked Point = "before-park"
)

// Kind names a kind of commit for Hooks.Submit and Hooks.Ack.
type Kind string

// The commit kinds.
const (
	KindStage   Kind = "stage"   // an inbound QoS 2 PUBLISH staged
	KindRelease Kind = "release" // an inbound QoS 2 message released to the log
	KindPublish Kind = "publish" // an inbound QoS 1 message appended to the log
	KindSession Kind = "session" // a session record write on SUBSCRIBE or UNSUBSCRIBE
	// KindCheckpoint is an online session's sender writing its
	// checkpoint. The hook runs with the session's record writes held, so
	// blocking it holds that session's SUBSCRIBE and UNSUBSCRIBE writes
	// too.
	KindCheckpoint Kind = "checkpoint"
	// KindQueueCut is retention moving an offline session's checkpoint
	// (Options.MaxQueuedMessages); client is that session's.
	KindQueueCut Kind = "queue-cut"
)

func (b *Broker) at(p Point, client string, pi uint16) {
	if f := b.opts.Hooks.At; HooksEnabled && f != nil {
		f(p, client, pi)
	}
}

func (b *Broker) beforeSubmit(k Kind, client string) {
	if f := b.opts.Hooks.Submit; HooksEnabled && f != nil && k != "" {
		f(k, client)
	}
}

// waitCommit waits for e's commit, and for the hold Hooks.Ack may put on
// it, within timeout. ok is false when the connection ended or the wait
// timed out (timedOut).
func (c *conn) waitCommit(e ackEntry, timer *time.Timer) (err error, ok, timedOut bool) {
	var hold <-chan struct{}
	if f := c.b.opts.Hooks.Ack; HooksEnabled && f != nil && e.kind != "" {
		var herr error
		hold, herr = f(e.kind, c.client)
		defer func() {
			if herr != nil && ok {
				err = herr
			}
		}()
	}
	if e.h == nil && hold == nil {
		return nil, true, false
	}
	armed := false
	wait := func(ch <-chan struct{}) (bool, bool) {
		if ch == nil {
			return true, false
		}
		select {
		case <-ch:
			return true, false
		default:
		}
		if !armed {
			c.flush() // the acknowledgements before this one go out now
			timer.Reset(c.b.opts.StoreTimeout)
			armed = true
		}
		select {
		case <-ch:
			return true, false
		case <-c.ctx.Done():
			return false, false
		case <-timer.C:
			return false, true
		}
	}
	if ok, timedOut = wait(hold); !ok {
		return nil, false, timedOut
	}
	if e.h != nil {
		if ok, timedOut = wait(e.h.Done()); !ok {
			return nil, false, timedOut
		}
		_, err = e.h.Result()
	}
	return err, true, false
}

// flushed writes out what is buffered, so that a hook that ends the
// process runs after the packet is on the wire.
func (c *conn) flushed() {
	if HooksEnabled {
		c.flush()
	}
}
