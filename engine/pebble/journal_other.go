//go:build !linux && !nopebble

package pebble

// journal is the commit journal's writer, Linux only (see journal.go):
// elsewhere Pebble writes its WAL and commits under SyncNone and
// SyncInterval wait for its writer, and a journal left by a Linux build
// is still applied at open.
type journal struct {
	seq     uint64
	flushed [2]<-chan struct{}
	half    int
}

// openJournal reports no journal: the engine goes without one.
func openJournal(string, int) (*journal, error) { return nil, nil }

func (j *journal) fits(int) bool        { return false }
func (j *journal) room(int) bool        { return false }
func (j *journal) put([]byte)           {}
func (j *journal) seal(int)             {}
func (j *journal) next(<-chan struct{}) {}
func (j *journal) restart(uint64)       {}
func (j *journal) sync() error          { return nil }
func (j *journal) close() error         { return nil }
