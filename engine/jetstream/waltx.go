//go:build !nojetstream

package jetstream

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/tidemark-io/tidemark/engine/driver"
)

// A transaction message carries every write and log entry of one group of
// commits in the single-writer layout (see the package doc, "Single
// writer"). Its payload is:
//
//	version byte (txVersion)
//	uvarint n, then n log entries: uvarint length, bytes
//	uvarint m, then m writes: kind byte (1 put, 2 delete), uvarint key
//	length, key, and for a put uvarint value length, value
//
// Log entries come first so a scan of the log decodes only what it needs.
const txVersion = 1

// logShift splits a single-writer log key into the stream sequence of its
// transaction message (high bits) and the entry's position in it (low
// bits): keys grow with the stream, and within a message with the
// position. 2^44 messages and 2^20 entries per message are far beyond
// what one stream holds.
const (
	logShift      = 20
	maxTxEntries  = 1<<logShift - 1
	txPosMask     = 1<<logShift - 1
	maxTxSequence = 1<<(64-logShift) - 1
)

// errBadTx reports an undecodable transaction message.
var errBadTx = errors.New("jetstream: undecodable transaction message")

// txKey returns the log key of entry pos of the message at seq.
func txKey(seq uint64, pos int) driver.LogKey {
	return driver.LogKey(seq<<logShift | uint64(pos))
}

// splitKey returns the message sequence and position of a log key.
func splitKey(k driver.LogKey) (seq uint64, pos int) {
	return uint64(k) >> logShift, int(uint64(k) & txPosMask)
}

// txWrite is one write of a transaction: the last write of its key in the
// group.
type txWrite struct {
	key     string
	val     []byte
	deleted bool
}

// encodeTx appends the payload of a transaction with log entries logs and
// writes ws to dst.
func encodeTx(dst []byte, logs [][]byte, ws []txWrite) []byte {
	dst = append(dst, txVersion)
	dst = binary.AppendUvarint(dst, uint64(len(logs)))
	for _, e := range logs {
		dst = binary.AppendUvarint(dst, uint64(len(e)))
		dst = append(dst, e...)
	}
	dst = binary.AppendUvarint(dst, uint64(len(ws)))
	for _, w := range ws {
		if w.deleted {
			dst = append(dst, byte(driver.OpDelete))
		} else {
			dst = append(dst, byte(driver.OpPut))
		}
		dst = binary.AppendUvarint(dst, uint64(len(w.key)))
		dst = append(dst, w.key...)
		if !w.deleted {
			dst = binary.AppendUvarint(dst, uint64(len(w.val)))
			dst = append(dst, w.val...)
		}
	}
	return dst
}

// txSize bounds the encoded size of a transaction carrying b.
func txSize(b *driver.Batch) int {
	n := 0
	for _, e := range b.Log {
		n += len(e) + binary.MaxVarintLen32
	}
	for _, op := range b.Ops {
		n += 1 + len(op.Key) + len(op.Value) + 2*binary.MaxVarintLen32
	}
	return n
}

// txDecoder walks a transaction payload.
type txDecoder struct {
	buf []byte
	err error
}

func (d *txDecoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.err = errBadTx
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *txDecoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.buf)) {
		d.err = errBadTx
		return nil
	}
	b := d.buf[:n:n]
	d.buf = d.buf[n:]
	return b
}

// decodeTxLog returns the log entries of a transaction payload; they alias
// data.
func decodeTxLog(data []byte) ([][]byte, error) {
	d, err := newTxDecoder(data)
	if err != nil {
		return nil, err
	}
	logs := d.logs()
	return logs, d.err
}

// decodeTx returns the log entry count and the writes of a transaction
// payload; values alias data.
func decodeTx(data []byte) (int, []txWrite, error) {
	d, err := newTxDecoder(data)
	if err != nil {
		return 0, nil, err
	}
	n := len(d.logs())
	m := d.uvarint()
	if d.err != nil || m > uint64(len(d.buf)) {
		return 0, nil, errBadTx
	}
	ws := make([]txWrite, 0, m)
	for range m {
		if len(d.buf) == 0 {
			return 0, nil, errBadTx
		}
		kind := driver.OpKind(d.buf[0])
		d.buf = d.buf[1:]
		w := txWrite{key: string(d.bytes())}
		switch kind {
		case driver.OpPut:
			w.val = d.bytes()
		case driver.OpDelete:
			w.deleted = true
		default:
			return 0, nil, errBadTx
		}
		if d.err != nil {
			return 0, nil, d.err
		}
		ws = append(ws, w)
	}
	if len(d.buf) != 0 {
		return 0, nil, errBadTx
	}
	return n, ws, nil
}

func newTxDecoder(data []byte) (*txDecoder, error) {
	if len(data) == 0 || data[0] != txVersion {
		return nil, fmt.Errorf("%w: unknown version", errBadTx)
	}
	return &txDecoder{buf: data[1:]}, nil
}

func (d *txDecoder) logs() [][]byte {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.buf)) {
		d.err = errBadTx
		return nil
	}
	logs := make([][]byte, 0, n)
	for range n {
		logs = append(logs, d.bytes())
		if d.err != nil {
			return nil
		}
	}
	return logs
}
