//go:build !linux && !nopebble

package pebble

// journal is the commit journal's writer, Linux only (see journal.go):
// elsewhere commits under SyncNone and SyncInterval wait for Pebble's WAL
// writer, and a journal left by a Linux build is still applied at open.
type journal struct{ seq uint64 }

// openJournal reports no journal: the engine goes without one.
func openJournal(string, int, uint64) (*journal, error) { return nil, nil }

func (j *journal) fits(int) bool { return false }
func (j *journal) room(int) bool { return false }
func (j *journal) put([]byte)    {}
func (j *journal) seal(int)      {}
func (j *journal) restart()      {}
func (j *journal) close() error  { return nil }
