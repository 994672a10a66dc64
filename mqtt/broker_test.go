package mqtt

import (
	"fmt"
	"testing"

	"github.com/tidemark-io/tidemark/table"
)

// TestSlotIDFormat pins the stored form of per-exchange record ids: the
// staged and outbound records of sessions written by earlier versions
// must still be found.
func TestSlotIDFormat(t *testing.T) {
	for _, pi := range []uint16{0, 1, 9, 10, 999, 12345, 65535} {
		for _, client := range []string{"", "c", "client/with/slashes"} {
			want := fmt.Sprintf("%s\x00%05d", client, pi)
			if got := slotID(client, pi); got != want {
				t.Errorf("slotID(%q, %d) = %q, want %q", client, pi, got, want)
			}
		}
	}
}

// TestAllocPISkipsHeldEndings: a packet id whose exchange ended but whose
// record delete is not stored yet is not handed out again, so the delete
// can never land on a newer exchange's record.
func TestAllocPISkipsHeldEndings(t *testing.T) {
	o := &outbound{inflight: map[uint16]*outMsg{}, ending: map[uint16]table.Cursor{}}
	o.nextPI = 65534
	o.ending[65535] = table.Cursor{Key: 7}
	o.ending[1] = table.Cursor{Key: 8}
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
