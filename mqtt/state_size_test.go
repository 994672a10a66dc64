package mqtt_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
	"github.com/tidemark-io/tidemark/table"
)

// doneTable is the broker's table of outbound QoS 2 completion marks
// (client id, NUL, cursor).
const doneTable = "mqtt.q2done"

// addDoneMarks writes n completion marks for client at log positions
// 1..n, far below any checkpoint, in commits the engine takes.
func addDoneMarks(t *testing.T, db *table.DB, client string, n int) {
	t.Helper()
	for lo := 1; lo <= n; lo += engine.MaxBatchEntries / 2 {
		tx := db.Begin()
		for i := lo; i < lo+engine.MaxBatchEntries/2 && i <= n; i++ {
			tx.PutState(doneTable, client+"\x00"+strconv.Itoa(i), nil)
		}
		if err := tx.Commit(ctxT(t)); err != nil {
			t.Fatalf("add marks: %v", err)
		}
	}
}

func countDoneMarks(t *testing.T, s *mqtttest.Server, client string) int {
	t.Helper()
	n := 0
	err := s.DB().Range(ctxT(t), doneTable, client+"\x00", func(r table.Record) bool {
		if !r.Deleted {
			n++
		}
		return true
	})
	if err != nil {
		t.Fatalf("range marks: %v", err)
	}
	return n
}

// TestSessionStateOverOneCommit gives a session more completion marks than
// one engine commit takes: the online session sheds them over several
// checkpoints, and a clean start discards them all instead of refusing
// the client.
func TestSessionStateOverOneCommit(t *testing.T) {
	const marks = engine.MaxBatchEntries + 3000
	s := startBroker(t, func(o *mqtt.Options) { o.CheckpointEvery = 20 * time.Millisecond })
	c := connect5(t, s.Addr, "big", false, 3600)
	c.sub("big/#", 2)
	c.close()

	addDoneMarks(t, s.DB(), "big", marks)
	c = connect5(t, s.Addr, "big", false, 3600)
	c.pub("big/1", 2, false, "one")
	c.expectOne("big/1", "one")
	deadline := time.Now().Add(wait)
	for countDoneMarks(t, s, "big") > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d completion marks below the checkpoint left after %v", countDoneMarks(t, s, "big"), wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.close()

	addDoneMarks(t, s.DB(), "big", marks)
	c = connect5(t, s.Addr, "big", true, 0)
	if n := countDoneMarks(t, s, "big"); n != 0 {
		t.Fatalf("clean start left %d completion marks", n)
	}
	c.pub("big/2", 1, false, "two")
	c.close()
}
