package kvlog

import (
	"fmt"
	"testing"

	"github.com/tidemark-io/tidemark/engine/driver"
)

// addCommits adds n commits of two entries each, under keys 10, 20, ...
func addCommits(r *Recent, n int) {
	for i := range n {
		k := driver.LogKey(10 * (i + 1))
		r.Add(k, [][]byte{fmt.Appendf(nil, "%d.0", k), fmt.Appendf(nil, "%d.1", k)})
	}
}

// A page starts at the seek, stops at the durable bound, and says where
// the next one starts; a seek before the held entries is not covered.
func TestRecentPage(t *testing.T) {
	var r Recent
	if _, _, ok := r.Page(nil, LogSeek(10), 100, 8); ok {
		t.Fatal("an empty buffer covers a scan")
	}
	addCommits(&r, 5) // keys 10..50, 10 entries
	page, next, ok := r.Page(nil, LogSeek(20), 100, 3)
	if !ok || len(page) != 3 || page[0].Key != 20 || page[0].Index != 0 || page[2].Key != 30 || string(page[2].Value) != "30.0" {
		t.Fatalf("page from 20: ok %v, %+v", ok, page)
	}
	if string(next) != string(LogKey(30, 1)) {
		t.Fatalf("next seek %x, want %x", next, LogKey(30, 1))
	}
	page, next, ok = r.Page(nil, next, 40, 8)
	if !ok || len(page) != 3 || page[0].Key != 30 || page[0].Index != 1 || page[2].Key != 40 || next != nil {
		t.Fatalf("page from 30.1 up to durable 40: ok %v, next %x, %+v", ok, next, page)
	}
	// A page is appended to the caller's buffer, over what it held.
	dst := make([]driver.Entry, 1, 4)
	if page, _, _ = r.Page(dst, LogKey(30, 1), 100, 2); len(page) != 2 || &page[0] != &dst[0] || string(page[0].Value) != "30.1" {
		t.Fatalf("page into a buffer: %+v", page)
	}
	if page, _, ok = r.Page(nil, LogSeek(60), 100, 8); !ok || len(page) != 0 {
		t.Fatalf("a scan past the last entry: ok %v, %d entries", ok, len(page))
	}
	if _, _, ok = r.Page(nil, LogSeek(5), 100, 8); ok {
		t.Fatal("a scan from before the oldest entry is covered")
	}
	r.Reset()
	if _, _, ok = r.Page(nil, LogSeek(50), 100, 8); ok || r.Len() != 0 {
		t.Fatal("a reset buffer still covers a scan")
	}
}

// Past its bound the buffer drops its older half and covers only from
// what it kept.
func TestRecentTrims(t *testing.T) {
	var r Recent
	addCommits(&r, recentMaxEntries/2+1) // one entry over the bound
	if n := r.Len(); n > recentMaxEntries || n < recentMaxEntries/2 {
		t.Fatalf("%d entries held after trimming, want %d..%d", n, recentMaxEntries/2, recentMaxEntries)
	}
	if _, _, ok := r.Page(nil, LogSeek(10), ^driver.LogKey(0), 8); ok {
		t.Fatal("a scan from a dropped entry is covered")
	}
	// Two entries per commit and an odd count dropped: the oldest held
	// entry is its commit's second, so that commit's prefix is not covered.
	if p, _, ok := r.Page(nil, LogKey(10*(recentMaxEntries/4+1), 1), ^driver.LogKey(0), 1); !ok || p[0].Index != 1 {
		t.Fatalf("the oldest held entry: ok %v, %+v", ok, p)
	}
	if _, _, ok := r.Page(nil, LogSeek(10*(recentMaxEntries/4+1)), ^driver.LogKey(0), 8); ok {
		t.Fatal("a scan from a commit whose first entry was dropped is covered")
	}
	last := driver.LogKey(10 * (recentMaxEntries/2 + 1))
	if page, _, ok := r.Page(nil, LogSeek(last), ^driver.LogKey(0), 8); !ok || len(page) != 2 {
		t.Fatalf("the newest commit: ok %v, %d entries", ok, len(page))
	}
}

// Opened over an empty log the buffer covers every scan until it drops
// an entry; opened over a log's last commit, scans from that commit on.
func TestRecentOpen(t *testing.T) {
	var r Recent
	r.Open(0, nil)
	if page, next, ok := r.Page(nil, LogSeek(0), 100, 8); !ok || len(page) != 0 || next != nil {
		t.Fatalf("an empty log's scan: ok %v, %d entries, next %x", ok, len(page), next)
	}
	addCommits(&r, 2) // keys 10 and 20
	if page, _, ok := r.Page(nil, LogSeek(0), 100, 8); !ok || len(page) != 4 || page[0].Key != 10 {
		t.Fatalf("a scan from the start of a log held whole: ok %v, %+v", ok, page)
	}
	addCommits(&r, recentMaxEntries/2) // past the bound: the oldest half goes
	if _, _, ok := r.Page(nil, LogSeek(0), ^driver.LogKey(0), 8); ok {
		t.Fatal("a scan from a dropped entry is covered")
	}

	r.Open(50, [][]byte{[]byte("50.0"), []byte("50.1")})
	page, _, ok := r.Page(nil, LogSeek(50), 100, 8)
	if !ok || len(page) != 2 || page[1].Index != 1 || page[1].Count != 2 || string(page[1].Value) != "50.1" {
		t.Fatalf("a scan from the last commit at open: ok %v, %+v", ok, page)
	}
	if _, _, ok := r.Page(nil, LogSeek(40), 100, 8); ok {
		t.Fatal("a scan from before the last commit at open is covered")
	}
	r.Open(0, nil)
	r.Reset()
	if _, _, ok := r.Page(nil, LogSeek(0), 100, 8); ok {
		t.Fatal("a reset buffer covers a scan")
	}
}
