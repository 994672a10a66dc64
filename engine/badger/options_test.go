//go:build !nobadger

package badger

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/engine"
)

func TestParamsValidated(t *testing.T) {
	for _, tc := range []struct{ name, value string }{
		{"memtable_mb", "16"},
		{"memtable_mb", "4096"},
		{"memtable_mb", "lots"},
		{"cache_mb", "0"},
		{"cache_mb", "-3"},
	} {
		_, err := engine.Open(t.Context(), Name, engine.Options{Dir: t.TempDir(), Params: map[string]string{tc.name: tc.value}})
		if !errors.Is(err, engine.ErrInvalidOption) {
			t.Fatalf("%s=%s: got %v, want ErrInvalidOption", tc.name, tc.value, err)
		}
		if !strings.Contains(err.Error(), tc.name) || !strings.Contains(err.Error(), "from") {
			t.Fatalf("%s=%s: error %q does not name the parameter and its range", tc.name, tc.value, err)
		}
	}
	d := openDB(t, t.TempDir(), func(o *engine.Options) {
		o.Params = map[string]string{"memtable_mb": "48", "cache_mb": "8"}
	})
	if want := limitsFor(48 << 20); d.lim != want {
		t.Fatalf("limits = %+v, want %+v", d.lim, want)
	}
	if _, err := engine.Commit(t.Context(), d, new(engine.Batch).Put([]byte("k"), []byte("v"))); err != nil {
		t.Fatalf("commit with custom params: %v", err)
	}
}

func TestValueThresholdGrowsWithMemtable(t *testing.T) {
	small, large := limitsFor(minMemtableMB<<20), limitsFor(maxMemtableMB<<20)
	if small.valueThreshold < 64 {
		t.Fatalf("value threshold at the smallest memtable is %d bytes", small.valueThreshold)
	}
	if large.valueThreshold <= small.valueThreshold {
		t.Fatalf("threshold %d at %d MiB not above %d at %d MiB", large.valueThreshold, maxMemtableMB, small.valueThreshold, minMemtableMB)
	}
	worst := int64(engine.MaxBatchEntries) * small.entrySize(1+engine.MaxKeySize, int(small.valueThreshold)-1)
	if worst >= small.size {
		t.Fatalf("largest batch estimates %d bytes, the transaction limit is %d", worst, small.size)
	}
}

// recorder is a slog handler that keeps every record.
type recorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.recs = append(r.recs, rec)
	r.mu.Unlock()
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

// TestBadgerLogsGoToSlog checks Badger's logs reach the configured logger,
// its info chatter at debug level.
func TestBadgerLogsGoToSlog(t *testing.T) {
	rec := &recorder{}
	d := openDB(t, t.TempDir(), func(o *engine.Options) { o.Logger = slog.New(rec) })
	if err := d.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	debug := 0
	for _, r := range rec.recs {
		if r.Level == slog.LevelInfo {
			t.Fatalf("Badger logged at info level: %q", r.Message)
		}
		if r.Level == slog.LevelDebug {
			debug++
		}
	}
	if debug == 0 {
		t.Fatalf("no Badger log reached the logger (%d records)", len(rec.recs))
	}
}

// TestUnsyncedModes commits under SyncInterval and SyncNone and checks the
// commits complete, are visible and survive a clean close.
func TestUnsyncedModes(t *testing.T) {
	for _, mode := range []engine.SyncMode{engine.SyncInterval, engine.SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			set := func(o *engine.Options) { o.Sync, o.SyncInterval = mode, 5*time.Millisecond }
			d := openDB(t, dir, set)
			var hs []*engine.Handle
			for i := 0; i < 200; i++ {
				hs = append(hs, submit(t, d, new(engine.Batch).Put([]byte{'k', byte(i)}, []byte{byte(i)}).Append([]byte{byte(i)})))
			}
			for i, h := range hs {
				if _, err := h.Wait(t.Context()); err != nil {
					t.Fatalf("commit %d: %v", i, err)
				}
			}
			time.Sleep(20 * time.Millisecond) // a few periodic syncs under SyncInterval
			if err := d.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			d2 := openDB(t, dir, set)
			if n := len(logValues(t, d2, 0)); n != 200 {
				t.Fatalf("after reopen %d log entries, want 200", n)
			}
			if v := mustGet(t, d2, string([]byte{'k', 199})); len(v) != 1 || v[0] != 199 {
				t.Fatalf("last value = %v", v)
			}
		})
	}
}

// TestDocumentedThresholds keeps the package doc's figures true.
func TestDocumentedThresholds(t *testing.T) {
	for mb, want := range map[int64]int64{64: 735, 32: 121} {
		if got := limitsFor(mb << 20).valueThreshold; got != want {
			t.Fatalf("value threshold at %d MiB = %d, the package doc says %d", mb, got, want)
		}
	}
}
