//go:build !nopebble

package pebble_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/tidemark-io/tidemark/engine"
)

// TestCloseWhileCommitting closes the engine while eight goroutines commit
// without pause, in every sync mode: every Submit and every handle either
// succeeds or fails with engine.ErrClosed, and Close returns once the
// commits in flight let go of Pebble (under SyncNone and SyncInterval a
// committer waits for its write outside the engine's lock).
func TestCloseWhileCommitting(t *testing.T) {
	for _, mode := range []engine.SyncMode{engine.SyncNone, engine.SyncInterval, engine.SyncAlways} {
		t.Run(mode.String(), func(t *testing.T) {
			for range 5 {
				e, err := engine.Open(t.Context(), "pebble", engine.Options{Dir: t.TempDir(), Sync: mode})
				if err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				for w := range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; ; i++ {
							b := new(engine.Batch).Put([]byte(fmt.Sprint("k", w, "/", i)), []byte("v")).Append([]byte("x"))
							h, err := e.Submit(t.Context(), b)
							if err == nil {
								_, err = h.Wait(t.Context())
							}
							if err != nil {
								if !errors.Is(err, engine.ErrClosed) {
									t.Errorf("commit while closing: %v, want nil or engine.ErrClosed", err)
								}
								return
							}
						}
					}()
				}
				if err := e.Close(); err != nil {
					t.Errorf("close while committing: %v", err)
				}
				wg.Wait()
			}
		})
	}
}
