package mqtt_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/table"
)

// TestSessionExpiryIndex: offline sessions expire from the expiry index,
// one whose client came back in time is kept, one that never expires and
// one with a long expiry are kept, and the index keeps no entry that is
// due.
func TestSessionExpiryIndex(t *testing.T) {
	s := startBroker(t)
	for i := range 30 {
		connect5(t, s.Addr, fmt.Sprintf("exp-%02d", i), false, 1).close()
	}
	connect5(t, s.Addr, "exp-long", false, 3600).close()
	connect5(t, s.Addr, "exp-never", false, 0xFFFFFFFF).close()
	connect5(t, s.Addr, "exp-back", false, 1).close()
	back := connect5(t, s.Addr, "exp-back", false, 1) // online again: never expires while so
	defer back.close()
	present := func(id string) bool {
		_, err := s.Parts().For(id).Get(ctxT(t), "mqtt.sessions", id)
		return err == nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for present("exp-00") || present("exp-29") {
		if time.Now().After(deadline) {
			t.Fatal("sessions with a 1 s expiry still there after 10 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // a pass after exp-back's first deadline
	for i := range 30 {
		if present(fmt.Sprintf("exp-%02d", i)) {
			t.Errorf("exp-%02d not expired", i)
		}
	}
	for _, id := range []string{"exp-long", "exp-never", "exp-back"} {
		if !present(id) {
			t.Errorf("%s expired", id)
		}
	}
	var due []string
	now := fmt.Sprintf("%016x", time.Now().UnixMilli())
	for i := range s.Parts().Count() {
		if err := s.Parts().DB(i).Range(ctxT(t), "mqtt.expiry", "", func(r table.Record) bool {
			if !r.Deleted && r.ID < now {
				due = append(due, strings.ReplaceAll(r.ID, "\x00", "/"))
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
	}
	if len(due) > 0 {
		t.Fatalf("expiry index entries left past their deadline: %v", due)
	}
}
