//go:build !nojetstream

package jetstream

import (
	"bytes"
	"slices"
	"testing"
)

// FuzzTxCodec: decoding any bytes returns an error or log entries and
// writes that survive an encode and decode unchanged; it never panics.
func FuzzTxCodec(f *testing.F) {
	f.Add(encodeTx(nil, [][]byte{[]byte("entry")}, []txWrite{{key: "k", val: []byte("v")}, {key: "gone", deleted: true}}))
	f.Add(encodeTx(nil, nil, nil))
	f.Add([]byte{txVersion, 0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		logs, err := decodeTxLog(data)
		n, ws, err2 := decodeTx(data)
		if err2 != nil {
			return
		}
		if err != nil || n != len(logs) {
			t.Fatalf("the log decodes with %v (%d entries) but the whole payload with %d entries", err, len(logs), n)
		}
		again := encodeTx(nil, logs, ws)
		n2, ws2, err := decodeTx(again)
		logs2, err2 := decodeTxLog(again)
		if err != nil || err2 != nil || n2 != n || !slices.EqualFunc(logs, logs2, bytes.Equal) ||
			!slices.EqualFunc(ws, ws2, func(a, b txWrite) bool {
				return a.key == b.key && a.deleted == b.deleted && bytes.Equal(a.val, b.val)
			}) {
			t.Fatalf("%x decodes to %q %v, its re-encoding %x to %q %v (%v, %v)", data, logs, ws, again, logs2, ws2, err, err2)
		}
	})
}
