package delivery

import (
	"testing"

	"github.com/tidemark-io/tidemark/mqtt/internal/logpos"
	"github.com/tidemark-io/tidemark/table"
)

// TestAllocPISkipsHeldEndings: a packet id whose exchange ended but whose
// record delete is not stored yet is not handed out again, so the delete
// can never land on a newer exchange's record.
func TestAllocPISkipsHeldEndings(t *testing.T) {
	o := &Session{inflight: map[uint16]*outMsg{}, ending: map[uint16]logpos.Pos{}}
	o.nextPI = 65534
	o.ending[65535] = logpos.At(0, table.Cursor{Key: 7})
	o.ending[1] = logpos.At(0, table.Cursor{Key: 8})
	o.inflight[2] = &outMsg{}
	if pi := o.allocPI(); pi != 3 {
		t.Fatalf("allocPI = %d, want 3 (65535 and 1 held, 2 in flight)", pi)
	}
	o.ended([]lazyEnd{{pi: 65535}, {pi: 1}})
	o.nextPI = 65534
	if pi := o.allocPI(); pi != 65535 {
		t.Fatalf("allocPI after the endings were stored = %d, want 65535", pi)
	}
}
