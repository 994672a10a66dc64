package table

import (
	"bytes"
	"context"
	"fmt"
)

// TableStats counts one table's records.
type TableStats struct {
	Name string
	// Live records and Deleted tombstones.
	Live, Deleted int
}

// Tables returns every table that has records, in name order, with its
// record counts. It reads one snapshot and visits every record, so it is
// an operator's tool (inspect), not something for a hot path.
func (db *DB) Tables(ctx context.Context) ([]TableStats, error) {
	snap, err := db.e.Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("table: tables: %w", err)
	}
	defer snap.Close()
	it, err := snap.Iter(ctx, []byte{kindRecord}, []byte{kindRecord + 1})
	if err != nil {
		return nil, fmt.Errorf("table: tables: %w", err)
	}
	defer it.Close()
	var out []TableStats
	n := 0
	for it.Next() {
		if n++; n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		k := it.Key()[1:]
		i := bytes.IndexByte(k, 0)
		if i < 0 {
			return nil, fmt.Errorf("table: tables: malformed record key %q", it.Key())
		}
		name := string(k[:i])
		if len(out) == 0 || out[len(out)-1].Name != name {
			out = append(out, TableStats{Name: name})
		}
		rec, err := decodeRecord(name, string(k[i+1:]), it.Value())
		if err != nil {
			return nil, err
		}
		if rec.Deleted {
			out[len(out)-1].Deleted++
		} else {
			out[len(out)-1].Live++
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("table: tables: %w", err)
	}
	return out, nil
}
