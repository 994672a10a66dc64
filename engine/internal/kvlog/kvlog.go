// Package kvlog is the on-disk layout the key-value backends (Pebble,
// Badger, LMDB) share: user data, the change log and engine metadata in
// three prefixes of one ordered keyspace. Log keys are big-endian so byte
// order is log order.
package kvlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/engine/driver"
)

// Prefixes of the three keyspaces.
const (
	DataPrefix = 'd'
	LogPrefix  = 'l'
	MetaPrefix = 'm'
)

// MetaFloor holds the truncation floor (8 bytes, big-endian).
var MetaFloor = []byte{MetaPrefix, 'f', 'l', 'o', 'o', 'r'}

// DataKey returns the stored form of a user key.
func DataKey(dst, key []byte) []byte {
	dst = append(dst[:0], DataPrefix)
	return append(dst, key...)
}

// DataUpper returns the stored upper bound for a user upper bound (nil
// means the end of the data keyspace).
func DataUpper(upper []byte) []byte {
	if upper == nil {
		return []byte{DataPrefix + 1}
	}
	return DataKey(nil, upper)
}

// LogKeyLen is the length of a stored log key: prefix, key, index.
const LogKeyLen = 1 + 8 + 4

// LogKey returns the stored key of entry index of log key k.
func LogKey(k driver.LogKey, index uint32) []byte {
	b := make([]byte, LogKeyLen)
	PutLogKey(b, k, index)
	return b
}

// PutLogKey writes LogKey(k, index) into b, which has LogKeyLen bytes.
func PutLogKey(b []byte, k driver.LogKey, index uint32) {
	b[0] = LogPrefix
	binary.BigEndian.PutUint64(b[1:], uint64(k))
	binary.BigEndian.PutUint32(b[9:], index)
}

// LogSeek returns the first stored key at or after log key k.
func LogSeek(k driver.LogKey) []byte { return LogKey(k, 0)[:logSeekLen] }

// logSeekLen is the length of a LogSeek: prefix and key.
const logSeekLen = 1 + 8

// LogUpper is the exclusive upper bound of the log keyspace.
var LogUpper = []byte{LogPrefix + 1}

// KeyOf returns the log key of a stored log key, or an error wrapping
// driver.ErrCorrupt when stored is not one.
func KeyOf(stored []byte) (driver.LogKey, error) {
	if len(stored) != LogKeyLen || stored[0] != LogPrefix {
		return 0, fmt.Errorf("%w: log key %x", driver.ErrCorrupt, stored)
	}
	return driver.LogKey(binary.BigEndian.Uint64(stored[1:])), nil
}

// LogValue returns the stored value of an entry: the number of entries that
// share its key (uvarint) followed by the payload.
func LogValue(count uint32, payload []byte) []byte {
	b := make([]byte, 0, binary.MaxVarintLen32+len(payload))
	b = binary.AppendUvarint(b, uint64(count))
	return append(b, payload...)
}

// LogValueLen is len(LogValue(count, payload)).
func LogValueLen(count uint32, payload []byte) int {
	var hdr [binary.MaxVarintLen32]byte
	return binary.PutUvarint(hdr[:], uint64(count)) + len(payload)
}

// PutLogValue writes LogValue(count, payload) into b, which has
// LogValueLen bytes.
func PutLogValue(b []byte, count uint32, payload []byte) {
	n := binary.PutUvarint(b, uint64(count))
	copy(b[n:], payload)
}

// DecodeEntry decodes a stored log key and value into an entry whose Value
// is a copy.
func DecodeEntry(key, value []byte) (driver.Entry, error) {
	e, err := decodeEntry(key, value)
	e.Value = append([]byte(nil), e.Value...)
	return e, err
}

// decodeEntry is DecodeEntry with an entry whose Value is part of value.
// key does not escape (errors quote a copy), so callers may decode from a
// key on their stack.
func decodeEntry(key, value []byte) (driver.Entry, error) {
	if len(key) != LogKeyLen || key[0] != LogPrefix {
		return driver.Entry{}, fmt.Errorf("%w: log key %x", driver.ErrCorrupt, bytes.Clone(key))
	}
	count, n := binary.Uvarint(value)
	if n <= 0 || count == 0 || count > 1<<32-1 {
		return driver.Entry{}, fmt.Errorf("%w: log entry header at %x", driver.ErrCorrupt, bytes.Clone(key))
	}
	e := driver.Entry{
		Key:   driver.LogKey(binary.BigEndian.Uint64(key[1:])),
		Index: binary.BigEndian.Uint32(key[9:]),
		Count: uint32(count),
		Value: value[n:],
	}
	if e.Index >= e.Count {
		return driver.Entry{}, fmt.Errorf("%w: log entry index %d of %d at %x", driver.ErrCorrupt, e.Index, e.Count, bytes.Clone(key))
	}
	return e, nil
}

// EncodeFloor and DecodeFloor store the truncation floor.
func EncodeFloor(k driver.LogKey) []byte { return binary.BigEndian.AppendUint64(nil, uint64(k)) }

// DecodeFloor decodes a stored truncation floor.
func DecodeFloor(b []byte) (driver.LogKey, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("%w: truncation floor of %d bytes", driver.ErrCorrupt, len(b))
	}
	return driver.LogKey(binary.BigEndian.Uint64(b)), nil
}

// ScanStart returns the first log key a scan from (from, exclusive) wants.
func ScanStart(from driver.LogKey, exclusive bool) driver.LogKey {
	if exclusive {
		return from + 1
	}
	return from
}

// CheckFloor reports ErrLogTruncated when a scan starting at start would
// miss entries below floor.
func CheckFloor(start, floor driver.LogKey) error {
	if floor > 0 && start < floor {
		return fmt.Errorf("%w: scan starts at %d, retained log starts at %d", driver.ErrLogTruncated, start, floor)
	}
	return nil
}

// PageReader reads the log page that starts at stored key seek, appending
// its entries to dst[:0], and returns them and the stored key the next
// page starts at (nil at the end). On the first page it checks start
// against the truncation floor.
type PageReader func(dst []driver.Entry, seek []byte, start driver.LogKey, first bool) ([]driver.Entry, []byte, error)

// scanScratch is what one ScanPages call reads pages into. The table
// layer scans the log after every commit, usually for one entry: pooled,
// such a scan allocates nothing of its own.
type scanScratch struct {
	page []driver.Entry
	seek [LogKeyLen]byte
}

var scratchPool = sync.Pool{New: func() any { return new(scanScratch) }}

// ScanPages runs a log scan from (from, exclusive) page by page, calling fn
// between pages with no engine lock or read transaction held, so fn may
// call back into the engine. eng names the engine in errors.
func ScanPages(ctx context.Context, eng string, from driver.LogKey, exclusive bool, read PageReader, fn func(driver.Entry) bool) error {
	sc := scratchPool.Get().(*scanScratch)
	defer func() {
		// No value outlives the scan in the pool.
		clear(sc.page[:cap(sc.page)])
		if cap(sc.page) <= 4*scanScratchKeep {
			scratchPool.Put(sc)
		}
	}()
	start := ScanStart(from, exclusive)
	sc.seek[0] = LogPrefix
	binary.BigEndian.PutUint64(sc.seek[1:], uint64(start))
	seek := sc.seek[:9]
	for first := true; ; first = false {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%s: scan log: %w", eng, err)
		}
		page, next, err := read(sc.page[:0], seek, start, first)
		if err != nil {
			return err
		}
		sc.page = page
		for _, e := range page {
			if !fn(e) {
				return nil
			}
		}
		if next == nil {
			return nil
		}
		seek = next
	}
}

// scanScratchKeep is the page capacity a pooled scratch keeps as is; one
// that grew past four times it is left to the collector.
const scanScratchKeep = 64

// SyncEvery calls sync every period until stop is closed: the SyncInterval
// mode of the backends whose own writes do not sync. Failures are logged;
// the next tick tries again.
func SyncEvery(stop <-chan struct{}, every time.Duration, sync func() error, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if err := sync(); err != nil {
				log.Error("periodic sync failed", "err", err)
			}
		}
	}
}
