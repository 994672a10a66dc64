package localkv

import (
	"fmt"
	"testing"

	"go.uber.org/goleak"
)

func TestBatchSnapshotAndIterator(t *testing.T) {
	db, err := Open(t.TempDir(), Options{BloomFilters: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Set([]byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := db.Get([]byte("a")); err != nil || !ok || string(v) != "1" {
		t.Fatalf("get a = %q, %v, %v", v, ok, err)
	}
	if _, ok, err := db.Get([]byte("nope")); err != nil || ok {
		t.Fatalf("get of an absent key: %v, %v", ok, err)
	}
	snap := db.NewSnapshot()
	b := db.NewBatch()
	for i := range 100 {
		b.Set(fmt.Appendf(nil, "k%03d", i), fmt.Appendf(nil, "v%d", i))
	}
	b.Delete([]byte("a"))
	if b.Empty() {
		t.Fatal("a batch with writes is empty")
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()

	// The snapshot taken before the batch sees none of it.
	if v, ok, _ := snap.Get([]byte("a")); !ok || string(v) != "1" {
		t.Fatalf("snapshot lost a: %q %v", v, ok)
	}
	if _, ok, _ := snap.Get([]byte("k000")); ok {
		t.Fatal("snapshot sees a later batch")
	}
	if err := snap.Close(); err != nil {
		t.Fatal(err)
	}
	// The store sees all of it, in key order within the bounds.
	it, err := db.NewIter([]byte("k010"), []byte("k020"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if want := fmt.Sprintf("k%03d", 10+n); string(it.Key()) != want {
			t.Fatalf("key %d = %q, want %q", n, it.Key(), want)
		}
		n++
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
	it.Close()
	if n != 10 {
		t.Fatalf("iterated %d keys, want 10", n)
	}
	if _, ok, _ := db.Get([]byte("a")); ok {
		t.Fatal("a survived its delete")
	}
}

// A store opened, written and closed leaves no goroutine behind: the JetStream
// engine opens one per engine.
func TestCloseLeaksNoGoroutine(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for range 3 {
		db, err := Open(t.TempDir(), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Set([]byte("a"), []byte("1")); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
