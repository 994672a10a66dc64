// Package table is Tidemark's record layer: named tables of versioned
// records over any engine, atomic transactions across tables, and a change
// log that subscribers replay and follow.
//
// # Records and the change log
//
// Every Put, Delete and Message appends one entry (table, id, version, op,
// value) to the engine's change log in the same atomic commit as the
// record change, so the log is the complete history of the records. A
// record's Version is the hybrid-logical-clock time its transaction was
// given; versions increase in commit order, also across restarts with a
// clock that went back (the DB persists a version reservation, see Open).
// Versions are not log keys: the engine assigns those, one per commit or
// one per entry depending on the engine.
//
// # Subscriptions
//
// Subscribe (and Follow, its callback form) replays the log from a Cursor
// and then follows it live. The layer never branches on the engine; where
// engines differ it relies only on engine.Entry's Index and Count to know
// when a log key is complete.
//
// Replay and live delivery read one ordered sequence from two places. The
// DB runs one tail that reads each new log entry once and keeps a window
// of recent decoded entries in memory. A reader behind the window scans
// the engine's log, re-opening its scan from the last entry it read at
// every yield (every YieldEvery entries), so engines whose iterators are
// snapshots still see new commits and retention is noticed; once its
// position is inside the window it reads the window. Before it first
// waits for new entries it confirms with one more engine scan that it has
// read everything committed. Because the window is contiguous and readers
// take only entries after their own position, the switch from replay to
// live has no gap (no commit can land between an exhausted iterator and a
// listener being enabled: there is no listener) and no duplicate, and a
// thousand live subscribers cost one log scan, not a thousand.
//
// The tail reads when the engine's watch signals new entries, or sooner
// when a committer calls DB.Pump: the reading goroutine, whichever it is,
// then has each live Fanout route the new entries at once if the Fanout's
// own goroutine is idle. A commit that completed without waiting thus
// reaches the Fanout's members in the committer's goroutine, with no
// goroutine hand-off between.
//
// # Cursor and checkpoint
//
// A Subscription reports two resume positions. Cursor is the handled
// frontier: it moves to a log key only after every entry of the subscribed
// table carrying that key was handed over or deliberately skipped (out of
// scope, filtered, superseded, a mark); other tables' entries alone never
// move it, and no early stop (a refused delivery, a close at a yield or
// while waiting for the consumer, a cancelled context) moves it. After a
// stop inside a transaction a resume from Cursor re-sends the handed-over
// part of that one transaction and loses nothing. Checkpoint is the
// acknowledged frontier: it moves over an event only once the event and
// every event delivered before it were acknowledged with Ack, keyed by the
// event's own position, never by its log key alone. Durable consumers
// persist Checkpoint; events that were queued, received or in flight but
// not acknowledged are replayed on resume whatever happened to the
// subscription or the process. With SubscribeOptions.Composite both may
// stop inside a log key, which makes resume exact (no re-sent entries)
// on engines whose commits share one key.
//
// A fresh durable consumer persists Head before it acknowledges its
// subscription: it then receives exactly what was committed after.
// TruncateBelow applies retention below the lowest checkpoint; a consumer
// left below it fails with ErrHistoryUnavailable rather than missing
// entries, as does one whose range holds rows bulk-loaded without history
// (Tx.Load).
//
// # Partitions
//
// OpenPartitions splits one set of tables over several engines, so that
// commits to different partitions never wait for one another (on
// JetStream, several streams led by different servers). A key names its
// partition by a stable hash; a transaction commits within one partition;
// Partitions.Subscribe merges one subscription per partition and resumes
// from a Cursors, one checkpoint per partition, each with the guarantees
// above. There is no order between partitions. Each engine records its
// place in the set, and a set opened otherwise than it was made is
// refused (ErrPartitionMismatch).
package table
