package conformance

import (
	"testing"

	"github.com/tidemark-io/tidemark/engine"
)

// TestNaiveCursorIsCaught gives C03 and C05 teeth: the literal fix of the
// write-up ("advance the cursor after each successful send") must fail
// both on every per-transaction-key engine, because a stop inside a
// transaction then excludes the rest of it on resume. On per-record
// engines the naive cursor is exact, and the test checks that too, so the
// cases' outcome is tied to the declared granularity and nothing else.
func TestNaiveCursorIsCaught(t *testing.T) {
	txns := [][]string{{"a"}, {"b", "c", "d"}, {"e"}}
	for _, name := range engine.Drivers() {
		tg := Target{Engine: name}
		t.Run(name, func(t *testing.T) {
			r := newRig(t, tg)
			perTxn := r.granularity() == engine.PerTransaction
			_, _, c03 := scenarioSendFails(r, "t3", txns, 3, true, false)
			_, _, c05 := scenarioCloseAtYield(newRig(t, tg), true, false)
			switch {
			case perTxn && c03 == nil:
				t.Fatalf("the naive cursor passed C03 on per-transaction %s", name)
			case perTxn && c05 == nil:
				t.Fatalf("the naive cursor passed C05 on per-transaction %s", name)
			case !perTxn && (c03 != nil || c05 != nil):
				t.Fatalf("on per-record %s the naive cursor is exact, yet: C03 %v; C05 %v", name, c03, c05)
			}
			t.Logf("naive cursor on %s: C03: %v; C05: %v", name, c03, c05)
			// The same scenarios with the real cursor pass.
			if _, _, err := scenarioSendFails(r, "r3", txns, 3, false, false); err != nil {
				t.Fatalf("real cursor, C03: %v", err)
			}
			if _, _, err := scenarioCloseAtYield(newRig(t, tg), false, false); err != nil {
				t.Fatalf("real cursor, C05: %v", err)
			}
		})
	}
}
