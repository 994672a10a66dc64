package session

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/internal/logpos"
	"github.com/tidemark-io/tidemark/mqtt/topic"
	"github.com/tidemark-io/tidemark/table"
)

// The session tables. Table holds one Record per stored session; the
// three indexes beside it keep the broker's periodic and startup work in
// proportion to what it has to look at, not to the number of stored
// sessions. All are written in the commit that writes the record (Put).
//
// The checkpoint index (CheckpointTable) holds one entry per stored
// session and partition of the log under its persisted checkpoint in
// that partition, with ids that sort as the checkpoints do (and a
// partition's after the first's: see CheckpointID). Retention reads it from the bottom: the entries of the
// sessions online on its node, whose acknowledged checkpoint is in
// memory, and the first offline one, instead of decoding every session
// record. Every stored session has an entry at or below its persisted
// checkpoint: a write that moves the checkpoint puts the new entry and
// drops the old one in the same commit (Index), except that an online
// session's frequent writes may leave its entry below for a while
// (IndexLazily), which costs a pass only the read of that entry while the
// session is online. An entry may outlive what
// it stood for (a commit that failed after Put moved the in-memory copy
// on, an index built from an older snapshot, a session discarded with
// another checkpoint): a reader checks the record behind any entry it
// would stop at, and bounds itself by the record's own checkpoint.
//
// The recovery index (RecoverTable) holds the client ids of sessions
// whose record is online or holds a will: what a restart has to look at.
// An entry whose record no longer needs it is passed over.
//
// The expiry index (ExpiryTable) holds one entry per offline session
// that expires, under its deadline, so an expiry pass reads only what is
// due. An entry may outlive the session's offline spell: the reader
// checks the record.
//
// The share-members index (SharesTable) holds one entry per shared
// subscription of a stored session, online or not, so that a node knows
// the groups that still have members while none of them is connected
// (their messages wait in the group's queue) without reading every
// session record.
const (
	Table           = "mqtt.sessions"     // id = client id
	CheckpointTable = "mqtt.checkpoints"  // id = [partition,] checkpoint (hex key, hex index), Sep, client id (unchecked state)
	RecoverTable    = "mqtt.recover"      // id = client id of a session online or holding a will (unchecked state)
	ExpiryTable     = "mqtt.expiry"       // id = deadline (hex Unix ms), Sep, client id: offline sessions that expire (unchecked state)
	SharesTable     = "mqtt.sharemembers" // id = ShareMemberID(group, filter, client) (unchecked state)
)

// ShareMemberID is the share-members index's id of client's subscription
// to filter in group: ids of one share's members share the prefix
// ShareMembers(group, filter). MQTT strings hold no U+0000, so the parts
// cannot run into one another.
func ShareMemberID(group, filter, client string) string {
	return ShareMembers(group, filter) + client
}

// ShareMembers is the prefix of the share-members index's ids of the
// members of share group/filter.
func ShareMembers(group, filter string) string { return group + Sep + filter + Sep }

// ParseShareMemberID reverses ShareMemberID; false for any other id.
func ParseShareMemberID(id string) (group, filter, client string, ok bool) {
	group, rest, ok1 := strings.Cut(id, Sep)
	filter, client, ok2 := strings.Cut(rest, Sep)
	return group, filter, client, ok1 && ok2 && group != "" && filter != "" && client != ""
}

// Sep separates a client id from the rest of a per-client record id;
// client ids cannot contain U+0000, so one client's records never share a
// prefix with another's.
const Sep = "\x00"

// The tables of a session's exchanges outside its record: inbound QoS 2
// messages staged until their PUBREL (StagedTable, first write wins),
// outbound QoS 2 exchanges in flight (OutTable, one record each, written
// before the PUBLISH and again after the PUBREC) and the QoS 2
// deliveries that completed above the persisted checkpoint (DoneTable),
// which a resume from the checkpoint must not send again. The last two
// hold unchecked state. All have ids that start with the client id and
// Sep, and a discard of the session deletes them with its record.
const (
	StagedTable = "mqtt.qos2in" // id = SlotID(client id, packet id)
	OutTable    = "mqtt.out"    // id = SlotID(client id, packet id)
	DoneTable   = "mqtt.q2done" // id = client id, Sep, log position
)

// SlotID is the id of client's record for packet id pi, in OutTable and
// the staging table of inbound QoS 2: the client id, Sep, and pi in five
// decimal digits, so one client's slots sort by packet id.
func SlotID(client string, pi uint16) string {
	b := make([]byte, 0, len(client)+len(Sep)+5)
	b = append(append(b, client...), Sep...)
	var digits [5]byte
	for i := 4; i >= 0; i-- {
		digits[i] = byte('0' + pi%10)
		pi /= 10
	}
	return string(append(b, digits[:]...))
}

// DoneID is the completion mark's id in DoneTable of client's delivery at
// log position pos: client, Sep, and pos as logpos.Pos.String writes it
// (for the first partition, as table.Cursor.String does), built in one
// allocation.
func DoneID(client string, pos logpos.Pos) string {
	var b strings.Builder
	b.Grow(len(client) + len(Sep) + 2*20 + 4)
	b.WriteString(client)
	b.WriteString(Sep)
	var num [20]byte
	if pos.Part != 0 {
		b.Write(strconv.AppendUint(num[:0], uint64(pos.Part), 10))
		b.WriteByte('/')
	}
	b.Write(strconv.AppendUint(num[:0], uint64(pos.C.Key), 10))
	if pos.C.Next != 0 {
		b.WriteByte('.')
		b.Write(strconv.AppendUint(num[:0], uint64(pos.C.Next), 10))
	}
	return b.String()
}

// CheckpointsIndexed, in CheckpointTable, marks a store whose checkpoint
// and recovery indexes are complete; ExpiryIndexed, in ExpiryTable, one
// whose expiry index is. Both sort after every entry of their index.
const (
	CheckpointsIndexed = "~indexed"
	ExpiryIndexed      = "~indexed"
	SharesIndexed      = "~indexed"
)

// Put adds the session record s of client to tx, with its entries in the
// checkpoint and recovery indexes (see Index) and, for an offline session
// that expires, its entry in the expiry index.
func Put(tx *table.Tx, client string, s *Record) error {
	if err := tx.PutState(Table, client, Encode(s)); err != nil {
		s.lazyIndex = 0 // asked of this write only
		return err
	}
	if err := Index(tx, client, s); err != nil {
		return err
	}
	if d, ok := s.Deadline(); ok {
		return tx.PutStateUnchecked(ExpiryTable, ExpiryID(d, client), nil)
	}
	return nil
}

// ExpiryID is the expiry index's id for client expiring at deadline (Unix
// ms): ids sort by deadline.
func ExpiryID(deadline int64, client string) string {
	return fmt.Sprintf("%016x", uint64(deadline)) + Sep + client
}

// ExpiryDue returns the id that sorts after the expiry index's entries
// due at now (Unix ms) and before every later one and the marker.
func ExpiryDue(now int64) string {
	return fmt.Sprintf("%016x", uint64(now)) + "\xff"
}

// ExpiryClient returns the client id of the expiry index's entry id.
func ExpiryClient(id string) string {
	_, client, _ := strings.Cut(id, Sep)
	return client
}

// CheckpointID is the checkpoint index's id of client at cp in partition
// part of the log. The 24 hex digits are the log key and the entry index
// cp stands for, the index of a whole-key cursor being all ones, so ids
// sort as table.Cursor.Less. In a partition other than the first they
// follow CheckpointPartition(part), which sorts after every id of the
// first partition and before the marker.
func CheckpointID(part int, cp table.Cursor, client string) string {
	idx := uint32(math.MaxUint32)
	if cp.Next > 0 {
		idx = cp.Next - 1
	}
	var b [24]byte
	hexPad(b[:16], uint64(cp.Key))
	hexPad(b[16:], uint64(idx))
	return CheckpointPartition(part) + string(b[:]) + Sep + client
}

// CheckpointPartition is the prefix of the checkpoint index's ids in
// partition part of the log: none for the first, so a store of one
// partition keeps its ids; "p" and two hex digits for the others.
func CheckpointPartition(part int) string {
	if part == 0 {
		return ""
	}
	var b [3]byte
	b[0] = 'p'
	hexPad(b[1:], uint64(part))
	return string(b[:])
}

// hexPad writes v in lower-case hex into all of b, zero-padded.
func hexPad(b []byte, v uint64) {
	const digits = "0123456789abcdef"
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = digits[v&0xf]
		v >>= 4
	}
}

// ParseCheckpointID reverses CheckpointID of partition part; false for
// any other id (another partition's, the marker).
func ParseCheckpointID(part int, id string) (table.Cursor, string, bool) {
	pre := CheckpointPartition(part)
	if !strings.HasPrefix(id, pre) {
		return table.Cursor{}, "", false
	}
	id = id[len(pre):]
	if len(id) < 25 || id[24] != Sep[0] {
		return table.Cursor{}, "", false
	}
	k, err1 := strconv.ParseUint(id[:16], 16, 64)
	idx, err2 := strconv.ParseUint(id[16:24], 16, 32)
	if err1 != nil || err2 != nil {
		return table.Cursor{}, "", false
	}
	cp := table.Cursor{Key: engine.LogKey(k)}
	if idx != math.MaxUint32 {
		cp.Next = uint32(idx) + 1
	}
	return cp, id[25:], true
}

// Loaded records that s was read from the store: its index entries are
// those of its checkpoint and flags. Call it on a decoded record before
// writing it back or deleting it, so Index and Unindex find its entries.
func (s *Record) Loaded() {
	s.indexed, s.hasIndexed = s.Checkpoint, true
	s.flagged = s.Online || s.Will != nil
	s.shares = s.shareKeys()
}

// shareKeys returns the shares s subscribes to, in subscription order.
func (s *Record) shareKeys() []topic.Share {
	var out []topic.Share
	for _, sub := range s.Subs {
		if sub.Group != "" {
			out = append(out, topic.Share{Group: sub.Group, Filter: sub.Filter})
		}
	}
	return out
}

// sameShares reports whether s subscribes to exactly the shares it
// indexed, without allocating: Put runs at every checkpoint write.
func (s *Record) sameShares() bool {
	i := 0
	for _, sub := range s.Subs {
		if sub.Group == "" {
			continue
		}
		if i == len(s.shares) || s.shares[i] != (topic.Share{Group: sub.Group, Filter: sub.Filter}) {
			return false
		}
		i++
	}
	return i == len(s.shares)
}

// indexShares adds to tx the share-members entries of the shares s
// gained and the deletion of those it lost since it was indexed.
func (s *Record) indexShares(tx *table.Tx, client string) error {
	if s.sameShares() {
		return nil
	}
	now := s.shareKeys()
	for _, sh := range s.shares {
		if !slices.Contains(now, sh) {
			if err := tx.DeleteStateUnchecked(SharesTable, ShareMemberID(sh.Group, sh.Filter, client)); err != nil {
				return err
			}
		}
	}
	for _, sh := range now {
		if !slices.Contains(s.shares, sh) {
			if err := tx.PutStateUnchecked(SharesTable, ShareMemberID(sh.Group, sh.Filter, client), nil); err != nil {
				return err
			}
		}
	}
	s.shares = now
	return nil
}

// IndexLazily lets the next Put of s leave its checkpoint entry below a
// checkpoint that moved up, and not put again the recovery entry it put
// already, while the entries were written in full less than maxAge ago.
// For the frequent checkpoint writes of an online session on a store no
// other node reads: retention takes such a session's checkpoint from
// memory, and moving its entry at every write cost two engine entries,
// and a tombstone that every later pass read past, per write. An entry
// left below stays at or below the persisted checkpoint, which is all a
// reader relies on (see CheckpointTable).
func (s *Record) IndexLazily(maxAge time.Duration) { s.lazyIndex = maxAge }

// Index adds to tx the index entries of s as it is being written: its
// checkpoint entry when the checkpoint moved (dropping the old one), and
// its recovery entry while it needs one. The recovery entry is put on
// every write that needs it (but a lazy one, see IndexLazily), so a
// record that needs it never goes without for long, whatever commit
// failed before. Put calls it; a caller writing only the indexes (of a
// store written before they existed) calls it on a record fresh from
// Decode.
func Index(tx *table.Tx, client string, s *Record) error {
	// Lazy: the entry may stay where it is (never above the checkpoint),
	// and the period since the last full write has not passed.
	lazy := s.hasIndexed && !s.Checkpoint.Below(s.indexed) && s.lazyIndex > 0 && time.Since(s.indexedAt) < s.lazyIndex
	s.lazyIndex = 0
	if !lazy && (!s.hasIndexed || s.indexed != s.Checkpoint) {
		for p := range s.Checkpoint.Len() {
			cp := s.Checkpoint.Of(p)
			had := s.hasIndexed && p < s.indexed.Len()
			if had && s.indexed.Of(p) == cp {
				continue
			}
			if had {
				if err := tx.DeleteStateUnchecked(CheckpointTable, CheckpointID(p, s.indexed.Of(p), client)); err != nil {
					return err
				}
			}
			if err := tx.PutStateUnchecked(CheckpointTable, CheckpointID(p, cp, client), nil); err != nil {
				return err
			}
		}
		s.indexed, s.hasIndexed = s.Checkpoint, true
	}
	if !lazy {
		s.indexedAt = time.Now()
	}
	switch {
	case s.NeedsRecovery() && lazy && s.flagged:
	case s.NeedsRecovery():
		if err := tx.PutStateUnchecked(RecoverTable, client, nil); err != nil {
			return err
		}
		s.flagged = true
	case s.flagged:
		if err := tx.DeleteStateUnchecked(RecoverTable, client); err != nil {
			return err
		}
		s.flagged = false
	}
	return s.indexShares(tx, client)
}

// Unindex adds to tx the deletion of the index entries of s, a record
// read from the store (Loaded) that tx deletes.
func Unindex(tx *table.Tx, client string, s *Record) {
	if s.hasIndexed {
		for p := range s.indexed.Len() {
			_ = tx.DeleteStateUnchecked(CheckpointTable, CheckpointID(p, s.indexed.Of(p), client))
		}
	}
	if s.flagged {
		_ = tx.DeleteStateUnchecked(RecoverTable, client)
	}
	for _, sh := range s.shares {
		_ = tx.DeleteStateUnchecked(SharesTable, ShareMemberID(sh.Group, sh.Filter, client))
	}
}
