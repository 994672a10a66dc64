package table_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/table"
)

// regInput is one register operation on one record.
type regInput struct {
	id     string
	op     string // "get", "put", "cas"
	value  string // put, cas: the value written (values are unique)
	expect string // cas: the value the writer expected ("" = absent)
}

// regOutput is what the operation observed.
type regOutput struct {
	value string // get: "" = absent
	ok    bool   // cas: committed
}

// registerModel is a linearizable register per record: Get returns the
// last value written, Put overwrites, a conditional write (ExpectVersion /
// ExpectAbsent, keyed by the unique value it read) commits exactly when the
// register still holds what it read.
var registerModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byID := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range history {
			id := op.Input.(regInput).id
			if _, ok := byID[id]; !ok {
				order = append(order, id)
			}
			byID[id] = append(byID[id], op)
		}
		out := make([][]porcupine.Operation, 0, len(order))
		for _, id := range order {
			out = append(out, byID[id])
		}
		return out
	},
	Init: func() interface{} { return "" },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		s, in, out := state.(string), input.(regInput), output.(regOutput)
		switch in.op {
		case "get":
			return out.value == s, s
		case "put":
			return true, in.value
		default:
			if s == in.expect {
				return out.ok, in.value
			}
			return !out.ok, s
		}
	},
	DescribeOperation: func(input, output interface{}) string {
		in, out := input.(regInput), output.(regOutput)
		switch in.op {
		case "get":
			return fmt.Sprintf("get(%s) -> %q", in.id, out.value)
		case "put":
			return fmt.Sprintf("put(%s, %q)", in.id, in.value)
		}
		return fmt.Sprintf("cas(%s, %q -> %q) -> %v", in.id, in.expect, in.value, out.ok)
	},
}

// TestHistoryLinearizableAndStreamsOrdered runs concurrent writers doing
// gets, puts and conditional writes while subscribers subscribe, ack,
// unsubscribe and resume from their checkpoints. porcupine checks the
// register history is linearizable; every subscriber's stream, per
// record, must hold each committed write exactly once (after removing the
// re-deliveries of a resume), in log order, and that order must respect
// real time: a write that returned before another began comes first.
func TestHistoryLinearizableAndStreamsOrdered(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	start, _ := db.Head(ctx)
	seed := rand.Uint64()
	const clients, opsPerClient, nIDs = 4, 150, 5
	var mu sync.Mutex
	var history []porcupine.Operation
	type span struct{ call, ret int64 }
	writes := map[string]span{} // committed value -> its operation's span
	record := func(op porcupine.Operation) {
		mu.Lock()
		history = append(history, op)
		in := op.Input.(regInput)
		if in.op == "put" || in.op == "cas" && op.Output.(regOutput).ok {
			writes[in.value] = span{op.Call, op.Return}
		}
		mu.Unlock()
	}
	now := func() int64 { return time.Now().UnixNano() }

	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(c)))
			for n := 0; n < opsPerClient; n++ {
				id := fmt.Sprintf("k%d", rng.IntN(nIDs))
				value := fmt.Sprintf("c%d-%d", c, n)
				switch p := rng.IntN(10); {
				case p < 4:
					call := now()
					rec, err := db.Get(ctx, "t", id)
					if err != nil && !errors.Is(err, table.ErrNotFound) {
						t.Errorf("get: %v", err)
						return
					}
					record(porcupine.Operation{ClientId: c, Input: regInput{id: id, op: "get"}, Call: call, Output: regOutput{value: string(rec.Value)}, Return: now()})
				case p < 8:
					call := now()
					tx := db.Begin()
					_ = tx.Put("t", id, []byte(value))
					if err := tx.Commit(ctx); err != nil {
						t.Errorf("put: %v", err)
						return
					}
					record(porcupine.Operation{ClientId: c, Input: regInput{id: id, op: "put", value: value}, Call: call, Output: regOutput{}, Return: now()})
				default:
					call := now()
					rec, err := db.Get(ctx, "t", id)
					absent := errors.Is(err, table.ErrNotFound)
					if err != nil && !absent {
						t.Errorf("get: %v", err)
						return
					}
					record(porcupine.Operation{ClientId: c, Input: regInput{id: id, op: "get"}, Call: call, Output: regOutput{value: string(rec.Value)}, Return: now()})
					call = now()
					tx := db.Begin()
					if absent {
						_ = tx.ExpectAbsent("t", id)
					} else {
						_ = tx.ExpectVersion("t", id, rec.Version)
					}
					_ = tx.Put("t", id, []byte(value))
					err = tx.Commit(ctx)
					if err != nil && !errors.Is(err, engine.ErrConflict) {
						t.Errorf("conditional put: %v", err)
						return
					}
					record(porcupine.Operation{ClientId: c, Input: regInput{id: id, op: "cas", value: value, expect: string(rec.Value)}, Call: call, Output: regOutput{ok: err == nil}, Return: now()})
				}
			}
		}()
	}

	// Subscribers: two on the table, one on a single record.
	scopes := []table.SubscribeOptions{{Table: "t"}, {Table: "t"}, {Table: "t", ID: "k0"}}
	streams := make([][]table.Event, len(scopes))
	saved := make([]table.Cursor, len(scopes))
	writersDone := make(chan struct{})
	var subsWG sync.WaitGroup
	for i, o := range scopes {
		subsWG.Add(1)
		go func() {
			defer subsWG.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(100+i)))
			saved[i] = start
			for {
				select {
				case <-writersDone:
					return
				default:
				}
				o.Start, o.IncludeSuperseded = saved[i], true
				s, err := db.Subscribe(ctx, o)
				if err != nil {
					t.Errorf("subscribe: %v", err)
					return
				}
				timeout := time.After(time.Duration(1+rng.IntN(20)) * time.Millisecond)
			recv:
				for n := rng.IntN(40); n > 0; n-- {
					select {
					case ev := <-s.Events():
						streams[i] = append(streams[i], ev)
						_ = s.Ack(ev)
					case <-timeout:
						break recv
					}
				}
				_ = s.Close()
				saved[i] = s.Checkpoint()
			}
		}()
	}
	wg.Wait()
	close(writersDone)
	subsWG.Wait()
	if t.Failed() {
		return
	}

	res, info := porcupine.CheckOperationsVerbose(registerModel, history, 30*time.Second)
	if res != porcupine.Ok {
		path := filepath.Join(t.TempDir(), "history.html")
		if os.Getenv("TIDEMARK_HISTORY_OUT") != "" {
			path = os.Getenv("TIDEMARK_HISTORY_OUT")
		}
		_ = porcupine.VisualizePath(registerModel, info, path)
		t.Fatalf("register history of %d operations is %v (seed %d); visualization: %s", len(history), res, seed, path)
	}

	// The log's per-record order of writes is the reference.
	logOrder := map[string][]string{}
	_, err := db.Follow(ctx, table.SubscribeOptions{Table: "t", Start: start, IncludeSuperseded: true, Hooks: table.Hooks{Live: func() bool { return false }}},
		func(ev table.Event) error { logOrder[ev.ID] = append(logOrder[ev.ID], string(ev.Value)); return nil })
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for id, vs := range logOrder {
		n += len(vs)
		for j := 1; j < len(vs); j++ {
			for i := 0; i < j; i++ {
				if writes[vs[j]].ret < writes[vs[i]].call {
					t.Fatalf("%s: log has %q before %q, but the second returned before the first began (seed %d)", id, vs[i], vs[j], seed)
				}
			}
		}
	}
	if n != len(writes) {
		t.Fatalf("the log holds %d writes, %d committed (seed %d)", n, len(writes), seed)
	}
	for i, o := range scopes {
		// Catch up from the saved checkpoint, then compare.
		o.Start, o.IncludeSuperseded = saved[i], true
		o.Hooks.Live = func() bool { return false }
		if _, err := db.Follow(ctx, o, func(ev table.Event) error { streams[i] = append(streams[i], ev); return nil }); err != nil {
			t.Fatal(err)
		}
		seen := map[[2]uint64]bool{}
		got := map[string][]string{}
		for _, ev := range streams[i] {
			k := [2]uint64{uint64(ev.Key), uint64(ev.Index)}
			if seen[k] {
				continue
			}
			seen[k] = true
			got[ev.ID] = append(got[ev.ID], string(ev.Value))
		}
		for id, want := range logOrder {
			if o.ID != "" && id != o.ID {
				continue
			}
			if fmt.Sprint(got[id]) != fmt.Sprint(want) {
				t.Fatalf("subscriber %d: stream of %s is %v, the log holds %v (seed %d)", i, id, got[id], want, seed)
			}
		}
	}
	t.Logf("%d operations linearizable; %d writes; streams of %d subscribers match the log", len(history), len(writes), len(scopes))
}
