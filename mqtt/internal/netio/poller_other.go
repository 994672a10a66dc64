//go:build !linux

package netio

import (
	"errors"
	"syscall"
)

// Poller reports input on idle sockets; it exists only on Linux. Where it
// does not, NewPoller fails and connections wait for input on goroutines
// of their own.
type Poller struct{}

// A Waiter is told that its socket has something to read (or has ended),
// and reports whether it was waiting for it.
type Waiter interface{ Ready() bool }

// NewPoller fails with errors.ErrUnsupported: there is no poller here.
func NewPoller() (*Poller, error) { return nil, errors.ErrUnsupported }

// Add is never called on a Poller that does not exist.
func (p *Poller) Add(Waiter) uint64 { return 0 }

// Remove does nothing.
func (p *Poller) Remove(uint64) {}

// Arm fails: there is no poller.
func (p *Poller) Arm(syscall.RawConn, uint64, bool) error { return errors.ErrUnsupported }

// Close does nothing.
func (p *Poller) Close() error { return nil }
