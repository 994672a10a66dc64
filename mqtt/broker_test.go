package mqtt

import (
	"fmt"
	"testing"
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
