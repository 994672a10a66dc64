// Package snapguard is the snapshot guard the embedded engines share
// (badger, lmdb, pebble): it keeps the store open under every read, knows the
// open snapshots, and closes the engine in the one safe order: wait out
// the reads in progress, refuse new ones, end every open snapshot, then
// release the store.
//
// Reads take the guard shared. An engine-level read uses Enter, which
// fails once the engine closed; a call on a snapshot uses RLock and then
// tests the snapshot's own closed flag, which Close sets (through the end
// function) while it holds the guard exclusively, so the store is never
// released under a read and a snapshot never outlives it.
package snapguard

import "sync"

// Guard guards a store and its open snapshots of type S. The zero value
// is not ready; use New.
type Guard[S comparable] struct {
	rw     sync.RWMutex
	closed bool // under rw

	mu   sync.Mutex
	open map[S]struct{}
}

// New returns a guard of an open store with no snapshot.
func New[S comparable]() *Guard[S] {
	return &Guard[S]{open: map[S]struct{}{}}
}

// Enter takes the guard shared for one read and reports whether the
// store is open. On true the caller calls RUnlock when the read is done;
// on false it holds nothing.
func (g *Guard[S]) Enter() bool {
	g.rw.RLock()
	if g.closed {
		g.rw.RUnlock()
		return false
	}
	return true
}

// RLock takes the guard shared whether or not the engine closed: for a
// snapshot's calls, which then test the snapshot's own closed flag.
func (g *Guard[S]) RLock() { g.rw.RLock() }

// RUnlock releases a shared hold taken by Enter or RLock.
func (g *Guard[S]) RUnlock() { g.rw.RUnlock() }

// Lock takes the guard exclusively, waiting out every read: for store
// maintenance no read may overlap (growing a memory map).
func (g *Guard[S]) Lock() { g.rw.Lock() }

// LockOpen takes the guard exclusively and reports whether the store is
// open; on false it holds nothing. For a write outside the writer that
// no read may overlap (a truncation moving the floor).
func (g *Guard[S]) LockOpen() bool {
	g.rw.Lock()
	if g.closed {
		g.rw.Unlock()
		return false
	}
	return true
}

// Unlock releases Lock or a successful LockOpen.
func (g *Guard[S]) Unlock() { g.rw.Unlock() }

// Closed reports whether Close began.
func (g *Guard[S]) Closed() bool {
	g.rw.RLock()
	defer g.rw.RUnlock()
	return g.closed
}

// Add records an open snapshot. Call it while holding the guard from a
// successful Enter, so Close cannot have passed it.
func (g *Guard[S]) Add(s S) {
	g.mu.Lock()
	g.open[s] = struct{}{}
	g.mu.Unlock()
}

// Remove forgets a snapshot its owner closed; removing one Close already
// ended is harmless.
func (g *Guard[S]) Remove(s S) {
	g.mu.Lock()
	delete(g.open, s)
	g.mu.Unlock()
}

// EndLocked calls end on every open snapshot and forgets them, leaving
// the store open: for a store replaced under its snapshots (pebble
// reopening after a write failure). The caller holds Lock.
func (g *Guard[S]) EndLocked(end func(S)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for s := range g.open {
		end(s)
		delete(g.open, s)
	}
}

// Close waits for the reads in progress, refuses later ones (Enter
// returns false), calls end on every open snapshot and then release, all
// while it holds the guard exclusively, and returns release's error. The
// engine calls it once, after its writer stopped.
func (g *Guard[S]) Close(end func(S), release func() error) error {
	g.rw.Lock()
	defer g.rw.Unlock()
	g.closed = true
	g.mu.Lock()
	for s := range g.open {
		end(s)
	}
	g.open = nil
	g.mu.Unlock()
	return release()
}
