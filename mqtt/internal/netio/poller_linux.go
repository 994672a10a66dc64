package netio

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Poller reports input on many idle sockets from one goroutine, so a
// connection that waits for its client's next packet needs no goroutine
// (and no goroutine stack) of its own. A socket is armed for one report
// at a time: Arm registers it, and the first input, hang-up or error
// after that calls its Waiter's Ready once; arming it again asks for the
// next. The poller's own wait is an epoll descriptor waited on through
// the runtime's network poller, so it holds no thread while idle.
//
// A Poller is safe for concurrent use.
type Poller struct {
	ep *os.File // the epoll descriptor, pollable by the runtime
	rc syscall.RawConn

	// mu guards waiters: read-locked by every Arm and every report, so
	// that the parks of thousands of connections at once (a PUBACK from
	// each device of a fleet) do not queue on it one by one.
	mu      sync.RWMutex
	waiters map[uint64]*waiter
	next    uint64

	done chan struct{}
}

// A Waiter is told that its socket has something to read (or has ended).
// Ready runs on the poller's goroutine: it must not block.
type Waiter interface{ Ready() }

// waiter is a registered Waiter and the state of arming its socket. The
// control functions handed to the two descriptors are made once, with the
// waiter: closures made per Arm would be allocations per park.
type waiter struct {
	w Waiter

	// armMu is held through an Arm: a report may resume the connection,
	// and the resumed read loop park again, before the Arm that armed it
	// has returned.
	armMu sync.Mutex
	// added says the socket is in the epoll set, so arming it again is a
	// modification, not an addition (one system call, not a failed one
	// and a second).
	added    bool
	sc       syscall.RawConn
	ev       unix.EpollEvent
	epfd     uintptr
	err      error
	onEpoll  func(epfd uintptr)
	onSocket func(fd uintptr)
}

// controlEpoll runs with the epoll descriptor held open.
func (e *waiter) controlEpoll(epfd uintptr) {
	e.epfd = epfd
	if err := e.sc.Control(e.onSocket); e.err == nil {
		e.err = err
	}
}

// controlSocket runs with both descriptors held open, so neither number
// can name another file by the time epoll_ctl runs.
func (e *waiter) controlSocket(fd uintptr) {
	op := unix.EPOLL_CTL_ADD
	if e.added {
		op = unix.EPOLL_CTL_MOD
	}
	e.err = unix.EpollCtl(int(e.epfd), op, int(fd), &e.ev)
	// The set and the flag disagree only if the socket left the set
	// (closed): try the other way, which fails as it should.
	switch {
	case op == unix.EPOLL_CTL_ADD && errors.Is(e.err, unix.EEXIST):
		e.err = unix.EpollCtl(int(e.epfd), unix.EPOLL_CTL_MOD, int(fd), &e.ev)
	case op == unix.EPOLL_CTL_MOD && errors.Is(e.err, unix.ENOENT):
		e.err = unix.EpollCtl(int(e.epfd), unix.EPOLL_CTL_ADD, int(fd), &e.ev)
	}
}

// pollBatch is how many reports one wait takes.
const pollBatch = 256

// NewPoller starts a poller.
func NewPoller() (*Poller, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return nil, os.NewSyscallError("setnonblock", err)
	}
	ep := os.NewFile(uintptr(fd), "epoll")
	rc, err := ep.SyscallConn()
	if err != nil {
		_ = ep.Close()
		return nil, fmt.Errorf("netio: poller: %w", err)
	}
	p := &Poller{ep: ep, rc: rc, waiters: map[uint64]*waiter{}, done: make(chan struct{})}
	go p.loop()
	return p, nil
}

// Add registers w and returns the id to arm its socket with.
func (p *Poller) Add(w Waiter) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next++
	id := p.next
	e := &waiter{w: w, ev: unix.EpollEvent{
		Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT,
		Fd:     int32(uint32(id)),       //nolint:gosec // the id's low half, stored bit for bit
		Pad:    int32(uint32(id >> 32)), //nolint:gosec // and its high half
	}}
	e.onEpoll, e.onSocket = e.controlEpoll, e.controlSocket
	p.waiters[id] = e
	return id
}

// Remove forgets id: no report reaches its Waiter after Remove returns,
// except one already being delivered. Closing the socket takes it off
// the poller; Remove frees the entry.
func (p *Poller) Remove(id uint64) {
	p.mu.Lock()
	delete(p.waiters, id)
	p.mu.Unlock()
}

// ErrUnknown is returned by Arm for an id that was never added or was
// removed.
var ErrUnknown = errors.New("netio: poller: unknown id")

// Arm asks for one report when the socket behind sc has input for id's
// Waiter. It fails when the socket or the poller is closed, or id is not
// registered.
func (p *Poller) Arm(sc syscall.RawConn, id uint64) error {
	p.mu.RLock()
	e := p.waiters[id]
	p.mu.RUnlock()
	if e == nil {
		return ErrUnknown
	}
	e.armMu.Lock()
	defer e.armMu.Unlock()
	e.sc, e.err = sc, nil
	perr := p.rc.Control(e.onEpoll)
	e.sc = nil
	if perr != nil {
		return fmt.Errorf("netio: poller closed: %w", perr)
	}
	if e.err != nil {
		return os.NewSyscallError("epoll_ctl", e.err)
	}
	e.added = true
	return nil
}

// Close stops the poller and waits for its goroutine. Waiters still
// armed get no report: close their sockets first.
func (p *Poller) Close() error {
	err := p.ep.Close()
	<-p.done
	return err
}

// loop waits for reports and hands them to their Waiters until Close.
func (p *Poller) loop() {
	defer close(p.done)
	var evs [pollBatch]unix.EpollEvent
	_ = p.rc.Read(func(epfd uintptr) bool {
		for {
			n, err := unix.EpollWait(int(epfd), evs[:], 0)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return true
			}
			for i := range evs[:n] {
				id := uint64(uint32(evs[i].Fd)) | uint64(uint32(evs[i].Pad))<<32
				p.mu.RLock()
				e := p.waiters[id]
				p.mu.RUnlock()
				if e != nil {
					e.w.Ready()
				}
			}
			if n < len(evs) {
				// Drained: wait in the runtime until the epoll descriptor
				// has reports again.
				return false
			}
		}
	})
}
