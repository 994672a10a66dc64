package space

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/engine"
)

func TestProbeLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	if err := Probe(dir, 3<<20+7); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, ProbeName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the probe file is still there: %v", err)
	}
	if err := Probe(filepath.Join(dir, "missing"), 1); err == nil {
		t.Fatal("a probe in a missing directory succeeded")
	}
}

// TestGuardRefusesUntilSpaceReturns moves the reserve above and below the
// free space of a real directory: the guard must refuse with
// ErrWriteFailed and ENOSPC, keep refusing and report it while short,
// and lift the refusal by itself once the reserve fits again.
func TestGuardRefusesUntilSpaceReturns(t *testing.T) {
	dir := t.TempDir()
	free, err := Free(dir)
	if err != nil {
		t.Skipf("free space not measured here: %v", err)
	}
	if free < 4*Slack {
		t.Skipf("%d bytes free in %s: too little to probe", free, dir)
	}
	var reserve atomic.Int64
	g := NewGuard("test", dir, reserve.Load, slog.New(slog.DiscardHandler))
	defer g.Close()

	if err := g.Admit(1 << 10); err != nil {
		t.Fatalf("admit with no reserve: %v", err)
	}
	reserve.Store(free + 1<<40) // more than the file system holds
	g.mu.Lock()
	g.checked = time.Time{} // measure again now, not after refreshEvery
	g.mu.Unlock()
	err = g.Admit(1)
	if !errors.Is(err, engine.ErrWriteFailed) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("admit beyond the free space = %v, want ErrWriteFailed and ENOSPC", err)
	}
	if err := g.Health(); !errors.Is(err, engine.ErrWriteFailed) {
		t.Fatalf("Health while short = %v", err)
	}
	if g.Has(1) {
		t.Fatal("Has(1) while refusing")
	}

	reserve.Store(0)
	deadline := time.Now().Add(30 * time.Second)
	for g.Health() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the guard did not lift its refusal once space returned: %v", g.Health())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := g.Admit(1 << 10); err != nil {
		t.Fatalf("admit after space returned: %v", err)
	}
}
