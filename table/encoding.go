package table

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unsafe"

	"github.com/tidemark-io/tidemark/engine"
)

// Engine keyspace layout. Every key starts with a one-byte kind; table
// names may not contain 0x00, so kind + table + 0x00 + id sorts by table,
// then by id in byte order, and no two (table, id) pairs share a key.
const (
	kindRecord  = 'r' // kind table 0 id -> record (header + value)
	kindVersion = 'v' // kind table 0 id -> 8-byte version; live records only
	kindMeta    = 'm' // kind name -> DB metadata
)

// MaxTableName is the longest table name, in bytes.
const MaxTableName = 64

// keyOverhead is the bytes a record key adds to table and id.
const keyOverhead = 2

// MaxID is the longest id, in bytes, of any table: as long as an MQTT topic
// may be.
const MaxID = 1<<16 - 1

// MaxIDLen returns the longest id, in bytes, a record of table may have:
// MaxID for every table. An id too long for the engine's key limit next to
// its table name is stored under a key made of its first bytes and its
// SHA-256 (see dataKey), with the whole id in the record.
func MaxIDLen(table string) int { return MaxID }

// inlineIDLen is the longest id of table that is its own key suffix.
func inlineIDLen(table string) int { return engine.MaxKeySize - keyOverhead - len(table) }

// idHashLen is the length of the hash that ends the key of a long id.
const idHashLen = sha256.Size

var metaHead = []byte{kindMeta, 'h', 'e', 'a', 'd'}

func validTable(table string) error {
	switch {
	case table == "":
		return fmt.Errorf("%w: empty table name: %w", ErrInvalidName, engine.ErrInvalidKey)
	case len(table) > MaxTableName:
		return fmt.Errorf("%w: table name of %d bytes, the limit is %d: %w", ErrInvalidName, len(table), MaxTableName, engine.ErrKeyTooLarge)
	case strings.IndexByte(table, 0) >= 0:
		return fmt.Errorf("%w: table name %q contains a NUL byte: %w", ErrInvalidName, table, engine.ErrInvalidKey)
	}
	return nil
}

func validID(table, id string) error {
	if err := validTable(table); err != nil {
		return err
	}
	if id == "" {
		return fmt.Errorf("%w: empty id in table %q: %w", ErrInvalidName, table, engine.ErrInvalidKey)
	}
	if n := MaxIDLen(table); len(id) > n {
		return fmt.Errorf("%w: id of %d bytes in table %q, the limit is %d: %w", ErrInvalidName, len(id), table, n, engine.ErrKeyTooLarge)
	}
	return nil
}

// dataKey is the engine key of table/id. An id longer than
// inlineIDLen(table) is keyed by its first bytes and its SHA-256, so the
// key is exactly engine.MaxKeySize bytes long: such keys sort among the
// others by those first bytes, and below them in hash order.
func dataKey(kind byte, table, id string) []byte {
	return appendDataKey(make([]byte, 0, dataKeyLen(table, id)), kind, table, id)
}

// dataKeyLen is the length of dataKey(kind, table, id).
func dataKeyLen(table, id string) int {
	if len(id) > inlineIDLen(table) {
		return engine.MaxKeySize
	}
	return keyOverhead + len(table) + len(id)
}

// appendDataKey appends dataKey(kind, table, id) to k.
func appendDataKey(k []byte, kind byte, table, id string) []byte {
	inline := inlineIDLen(table)
	k = append(k, kind)
	k = append(k, table...)
	k = append(k, 0)
	if len(id) > inline {
		sum := sha256.Sum256([]byte(id))
		k = append(k, id[:inline-idHashLen]...)
		return append(k, sum[:]...)
	}
	return append(k, id...)
}

// longID reports whether table/id is keyed by its hash.
func longID(table, id string) bool { return len(id) > inlineIDLen(table) }

// prefixBounds returns the key range of table's records whose id starts
// with prefix. A prefix longer than the part of a long id its key keeps
// gives the bounds of that part: exact says whether every record in the
// range has the prefix, or the caller must check.
func prefixBounds(table, prefix string) (lower, upper []byte, exact bool) {
	exact = true
	if keep := inlineIDLen(table) - idHashLen; len(prefix) > keep {
		prefix, exact = prefix[:keep], false
	}
	lower = dataKey(kindRecord, table, prefix)
	p := []byte(prefix)
	for len(p) > 0 && p[len(p)-1] == 0xff {
		p = p[:len(p)-1]
	}
	if len(p) == 0 {
		upper = append([]byte{kindRecord}, table...)
		return lower, append(upper, 1), exact
	}
	p[len(p)-1]++
	return lower, dataKey(kindRecord, table, string(p)), exact
}

// Stored record: format, flags, version, value; a record whose id is
// keyed by its hash (recordFormatLong) holds the id between version and
// value, as a uvarint length and the bytes.
const (
	recordFormat     = 1
	recordFormatLong = 2
	flagDeleted      = 1
	recordHdrSize    = 1 + 1 + 8
)

// encodeRecord encodes a record of table/id.
func encodeRecord(table, id string, v Version, deleted bool, value []byte) []byte {
	return appendRecord(make([]byte, 0, recordLen(table, id, value)), table, id, v, deleted, value)
}

// recordLen bounds the length of encodeRecord(table, id, _, _, value).
func recordLen(table, id string, value []byte) int {
	if longID(table, id) {
		return recordHdrSize + binary.MaxVarintLen32 + len(id) + len(value)
	}
	return recordHdrSize + len(value)
}

// appendRecord appends encodeRecord(table, id, v, deleted, value) to b;
// the version is at recordVersionAt from where it started.
func appendRecord(b []byte, table, id string, v Version, deleted bool, value []byte) []byte {
	format, flags := byte(recordFormat), byte(0)
	if longID(table, id) {
		format = recordFormatLong
	}
	if deleted {
		flags = flagDeleted
	}
	b = append(b, format, flags)
	b = binary.BigEndian.AppendUint64(b, uint64(v))
	if format == recordFormatLong {
		b = binary.AppendUvarint(b, uint64(len(id)))
		b = append(b, id...)
	}
	return append(b, value...)
}

// recordVersionAt is the offset of the version in an encoded record.
const recordVersionAt = 2

// decodeRecord decodes the record stored under the key of table/id. For a
// record keyed by its hash the id comes from the record itself, so id may
// be the truncated one a key holds; the caller that looked up a whole id
// compares it with Record.ID.
func decodeRecord(table, id string, b []byte) (Record, error) {
	if len(b) < recordHdrSize || (b[0] != recordFormat && b[0] != recordFormatLong) {
		return Record{}, fmt.Errorf("table: record %s/%q: %w: bad header", table, id, engine.ErrCorrupt)
	}
	r := Record{Table: table, ID: id, Version: Version(binary.BigEndian.Uint64(b[2:])), Deleted: b[1]&flagDeleted != 0}
	value := b[recordHdrSize:]
	if b[0] == recordFormatLong {
		n, k := binary.Uvarint(value)
		if k <= 0 || n > uint64(len(value)-k) {
			return Record{}, fmt.Errorf("table: record %s/%.40q: %w: bad id", table, id, engine.ErrCorrupt)
		}
		r.ID = string(value[k : k+int(n)])
		value = value[k+int(n):]
	}
	if !r.Deleted {
		r.Value = append([]byte{}, value...)
	}
	return r, nil
}

// Log entry payload: format, op, table, id, version, value.
const entryFormat = 1

func encodeEntry(op Op, table, id string, v Version, value []byte) []byte {
	b, _ := encodeEntryAt(op, table, id, v, value)
	return b
}

// encodeEntryAt is encodeEntry that also returns the version's offset.
func encodeEntryAt(op Op, table, id string, v Version, value []byte) ([]byte, int) {
	return appendEntryAt(make([]byte, 0, entryLen(table, id, value)), op, table, id, v, value)
}

// entryLen bounds the length of a log entry of table, id and value.
func entryLen(table, id string, value []byte) int {
	return 2 + 2*binary.MaxVarintLen32 + len(table) + len(id) + 8 + len(value)
}

// appendEntryAt appends a log entry to b and returns b and the offset in
// it of the entry's version.
func appendEntryAt(b []byte, op Op, table, id string, v Version, value []byte) ([]byte, int) {
	b = append(b, entryFormat, byte(op))
	b = binary.AppendUvarint(b, uint64(len(table)))
	b = append(b, table...)
	b = binary.AppendUvarint(b, uint64(len(id)))
	b = append(b, id...)
	at := len(b)
	b = binary.BigEndian.AppendUint64(b, uint64(v))
	return append(b, value...), at
}

// logEntry is one decoded change-log entry. Entries are shared between
// the tail's window and every reader, so nothing may modify one.
type logEntry struct {
	pos     pos
	count   uint32
	op      Op
	table   string
	id      string
	version Version
	value   []byte
	err     error // set when the payload does not decode
}

func (e *logEntry) last() bool { return e.pos.idx+1 >= e.count }

func decodeEntry(en engine.Entry) *logEntry {
	e := &logEntry{}
	decodeEntryInto(e, en, "")
	return e
}

// decodeEntryInto decodes en into e. A table name equal to table is
// table itself, not a copy: scans meet the same few names again and again.
func decodeEntryInto(e *logEntry, en engine.Entry, table string) {
	*e = logEntry{pos: pos{key: en.Key, idx: en.Index}, count: en.Count}
	b := en.Value
	bad := func(why string) {
		e.err = fmt.Errorf("table: log entry %d/%d: %w: %s", en.Key, en.Index, engine.ErrCorrupt, why)
	}
	if len(b) < 2 || b[0] != entryFormat {
		bad("unknown format")
		return
	}
	e.op = Op(b[1])
	if e.op < OpPut || e.op > OpMark {
		bad(fmt.Sprintf("unknown op %d", b[1]))
		return
	}
	b = b[2:]
	field := func() ([]byte, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, false
		}
		f := b[k : k+int(n)]
		b = b[k+int(n):]
		return f, true
	}
	tb, ok := field()
	if !ok || len(tb) == 0 {
		bad("table name")
		return
	}
	if e.table = table; string(tb) != table {
		e.table = string(tb)
	}
	id, ok := field()
	if !ok {
		bad("id")
		return
	}
	// The entry's bytes are never modified (see engine.Entry), and e
	// keeps them as its value: the id aliases them too.
	e.id = unsafe.String(unsafe.SliceData(id), len(id))
	if len(b) < 8 {
		bad("version")
		return
	}
	e.version = Version(binary.BigEndian.Uint64(b))
	e.value = b[8:]
}

// pos is a position in the log: entry idx of key. Positions are totally
// ordered; idx == wholeKey stands for "after every entry of key".
type pos struct {
	key engine.LogKey
	idx uint32
}

const wholeKey = math.MaxUint32

func (p pos) less(q pos) bool { return p.key < q.key || (p.key == q.key && p.idx < q.idx) }

// Cursor is a resume position in the change log: everything at or before
// it is done. A cursor with Next == 0 covers every entry carrying Key (the
// coarse, transaction-granular form); Next > 0 covers only the entries of
// Key with Index < Next (the composite form, exact on engines whose
// commits share one key). The zero Cursor is the start of the log.
type Cursor struct {
	Key  engine.LogKey
	Next uint32
}

// Covers reports whether the entry at (key, index) is at or before c.
func (c Cursor) Covers(key engine.LogKey, index uint32) bool {
	return key < c.Key || (key == c.Key && (c.Next == 0 || index < c.Next))
}

// Less reports whether c is strictly before d.
func (c Cursor) Less(d Cursor) bool { return c.pos().less(d.pos()) }

// Coarse returns the latest transaction-granular cursor at or before c.
func (c Cursor) Coarse() Cursor {
	if c.Next == 0 || c.Key == 0 {
		return Cursor{Key: c.Key}
	}
	return Cursor{Key: c.Key - 1}
}

func (c Cursor) pos() pos {
	if c.Next == 0 {
		return pos{key: c.Key, idx: wholeKey}
	}
	return pos{key: c.Key, idx: c.Next - 1}
}

func (p pos) cursor() Cursor {
	if p.idx == wholeKey {
		return Cursor{Key: p.key}
	}
	return Cursor{Key: p.key, Next: p.idx + 1}
}

// String renders c as its text form: "K" or "K.N".
func (c Cursor) String() string {
	if c.Next == 0 {
		return strconv.FormatUint(uint64(c.Key), 10)
	}
	return strconv.FormatUint(uint64(c.Key), 10) + "." + strconv.FormatUint(uint64(c.Next), 10)
}

// MarshalText encodes c as "K" or "K.N" in decimal; the form is stable.
func (c Cursor) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText decodes the form MarshalText writes.
func (c *Cursor) UnmarshalText(b []byte) error {
	ks, ns, composite := strings.Cut(string(b), ".")
	k, err := strconv.ParseUint(ks, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: cursor %q: %w", ErrBadCursor, b, engine.ErrCorrupt)
	}
	var n uint64
	if composite {
		if n, err = strconv.ParseUint(ns, 10, 32); err != nil || n == 0 {
			return fmt.Errorf("%w: cursor %q: %w", ErrBadCursor, b, engine.ErrCorrupt)
		}
	}
	*c = Cursor{Key: engine.LogKey(k), Next: uint32(n)}
	return nil
}

// MarshalBinary encodes c as 8 big-endian bytes of Key, followed by 4 of
// Next when Next > 0; the form is stable.
func (c Cursor) MarshalBinary() ([]byte, error) {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 12), uint64(c.Key))
	if c.Next > 0 {
		b = binary.BigEndian.AppendUint32(b, c.Next)
	}
	return b, nil
}

// UnmarshalBinary decodes the form MarshalBinary writes.
func (c *Cursor) UnmarshalBinary(b []byte) error {
	switch len(b) {
	case 8:
		*c = Cursor{Key: engine.LogKey(binary.BigEndian.Uint64(b))}
	case 12:
		n := binary.BigEndian.Uint32(b[8:])
		if n == 0 {
			return fmt.Errorf("%w: composite cursor with Next 0: %w", ErrBadCursor, engine.ErrCorrupt)
		}
		*c = Cursor{Key: engine.LogKey(binary.BigEndian.Uint64(b)), Next: n}
	default:
		return fmt.Errorf("%w: cursor of %d bytes: %w", ErrBadCursor, len(b), engine.ErrCorrupt)
	}
	return nil
}

func encodeHead(v Version, k engine.LogKey) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(v)), uint64(k))
}

func decodeHead(b []byte) (Version, engine.LogKey, error) {
	if len(b) != 16 {
		return 0, 0, fmt.Errorf("table: head metadata of %d bytes: %w", len(b), engine.ErrCorrupt)
	}
	return Version(binary.BigEndian.Uint64(b)), engine.LogKey(binary.BigEndian.Uint64(b[8:])), nil
}
