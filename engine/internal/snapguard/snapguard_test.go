package snapguard

import (
	"errors"
	"testing"
	"time"
)

type snap struct{ ended bool }

// TestCloseOrder checks that Close waits for a read in progress, ends the
// snapshots still open but not the removed ones, releases the store last
// and refuses reads after it.
func TestCloseOrder(t *testing.T) {
	g := New[*snap]()
	a, b := &snap{}, &snap{}
	if !g.Enter() {
		t.Fatal("Enter on an open guard failed")
	}
	g.Add(a)
	g.Add(b)
	g.Remove(b)
	released := make(chan error, 1)
	var order []string
	go func() {
		released <- g.Close(func(s *snap) {
			s.ended = true
			order = append(order, "end")
		}, func() error {
			order = append(order, "release")
			return errors.New("released")
		})
	}()
	select {
	case err := <-released:
		t.Fatalf("Close returned (%v) while a read held the guard", err)
	case <-time.After(20 * time.Millisecond):
	}
	g.RUnlock()
	if err := <-released; err == nil || err.Error() != "released" {
		t.Fatalf("Close returned %v, want release's error", err)
	}
	if !a.ended || b.ended {
		t.Fatalf("ended: open snapshot %v, removed one %v; want true, false", a.ended, b.ended)
	}
	if len(order) != 2 || order[0] != "end" || order[1] != "release" {
		t.Fatalf("Close ran %v, want the snapshots ended before the store's release", order)
	}
	if g.Enter() {
		t.Fatal("Enter after Close succeeded")
	}
	if !g.Closed() {
		t.Fatal("Closed after Close is false")
	}
	g.Remove(a) // a snapshot closed by its owner after the engine: harmless
}

// TestEndLockedKeepsStoreOpen checks that EndLocked ends and forgets the
// open snapshots while the store stays open, and that LockOpen refuses
// once Close ran.
func TestEndLockedKeepsStoreOpen(t *testing.T) {
	g := New[*snap]()
	a := &snap{}
	g.Add(a)
	if !g.LockOpen() {
		t.Fatal("LockOpen on an open guard failed")
	}
	g.EndLocked(func(s *snap) { s.ended = true })
	g.Unlock()
	if !a.ended {
		t.Fatal("EndLocked did not end the open snapshot")
	}
	if !g.Enter() {
		t.Fatal("Enter after EndLocked failed: the store should stay open")
	}
	g.RUnlock()
	ended := 0
	if err := g.Close(func(*snap) { ended++ }, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	if ended != 0 {
		t.Fatalf("Close ended %d snapshots; EndLocked had forgotten them all", ended)
	}
	if g.LockOpen() {
		t.Fatal("LockOpen after Close succeeded")
	}
}
