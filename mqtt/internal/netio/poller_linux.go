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
// (and no goroutine stack) of its own. Arm registers a socket, once,
// edge-triggered: every input, hang-up or error after that calls its
// Waiter's Ready, which says whether the waiter was waiting for it.
// Arming again costs nothing, unless a report came that the waiter was
// not waiting for (it was reading already), which disarmed the socket,
// or the waiter's last read may have left input behind: the Arm then
// arms it again, when input already there is reported at once (input
// that is there and was reported before would otherwise not be again).
// So a connection that parks after every packet, as a fleet's
// devices do, parks without a system call, and one that keeps reading
// is told once, not at every packet. The poller's own wait is an epoll
// descriptor waited on through the runtime's network poller, so it holds
// no thread while idle.
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
// Ready runs on the poller's goroutine: it must not block. It reports
// whether the waiter was waiting for input; false disarms the socket
// until the next Arm. A report may come for input the waiter has read
// since: it is a hint to read, not a promise of input.
type Waiter interface{ Ready() bool }

// waiter is a registered Waiter and the state of arming its socket. The
// control functions handed to the two descriptors are made once, with the
// waiter: closures made per Arm would be allocations per park.
type waiter struct {
	w Waiter

	// armMu is held through an Arm and through a report with its
	// disarming, so that a disarm never lands after an Arm that found
	// the socket armed: the Arm then sees it disarmed and arms it again.
	armMu sync.Mutex
	// added says the socket is in the epoll set, and disarmed that a
	// report the waiter was not waiting for turned its events off.
	added, disarmed bool
	sc              syscall.RawConn // the socket, from its first Arm
	ev              unix.EpollEvent // the events to arm
	off             unix.EpollEvent // disarmed: one hang-up report at most
	op              int
	set             *unix.EpollEvent
	epfd            uintptr
	err             error
	onEpoll         func(epfd uintptr)
	onSocket        func(fd uintptr)
}

// control runs epoll_ctl op with set on the waiter's socket, both
// descriptors held open. armMu held.
func (e *waiter) control(p *Poller, op int, set *unix.EpollEvent) error {
	e.op, e.set, e.err = op, set, nil
	if perr := p.rc.Control(e.onEpoll); perr != nil {
		return fmt.Errorf("netio: poller closed: %w", perr)
	}
	if e.err != nil {
		return os.NewSyscallError("epoll_ctl", e.err)
	}
	return nil
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
	e.err = unix.EpollCtl(int(e.epfd), e.op, int(fd), e.set)
	// The set and the flag disagree only if the socket left the set
	// (closed): try the other way, which fails as it should.
	switch {
	case e.op == unix.EPOLL_CTL_ADD && errors.Is(e.err, unix.EEXIST):
		e.err = unix.EpollCtl(int(e.epfd), unix.EPOLL_CTL_MOD, int(fd), e.set)
	case e.op == unix.EPOLL_CTL_MOD && errors.Is(e.err, unix.ENOENT):
		e.err = unix.EpollCtl(int(e.epfd), unix.EPOLL_CTL_ADD, int(fd), e.set)
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
		Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLET,
		Fd:     int32(uint32(id)),       //nolint:gosec // the id's low half, stored bit for bit
		Pad:    int32(uint32(id >> 32)), //nolint:gosec // and its high half
	}}
	// Disarmed, a socket still reports a hang-up or an error (epoll
	// always does): one-shot, so a closed socket does not report on and on.
	e.off = e.ev
	e.off.Events = unix.EPOLLONESHOT
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

// Arm asks for reports when the socket behind sc has input for id's
// Waiter. Edge-triggered, a report comes for input that arrives, not for
// input that is there: so more says whether the socket may hold input
// the Waiter has not read since its last report (its last read filled
// its buffer), and Arm then arms it again, which reports that input at
// once. That, the first Arm and an Arm after a report the Waiter was not
// waiting for cost a system call; any other costs none. sc must be the
// same socket at every Arm of id. It fails when the socket or the poller
// is closed, or id is not registered.
func (p *Poller) Arm(sc syscall.RawConn, id uint64, more bool) error {
	p.mu.RLock()
	e := p.waiters[id]
	p.mu.RUnlock()
	if e == nil {
		return ErrUnknown
	}
	e.armMu.Lock()
	defer e.armMu.Unlock()
	switch {
	case !e.added:
		e.sc = sc
		if err := e.control(p, unix.EPOLL_CTL_ADD, &e.ev); err != nil {
			return err
		}
		e.added = true
	case e.disarmed || more:
		if err := e.control(p, unix.EPOLL_CTL_MOD, &e.ev); err != nil {
			return err
		}
		e.disarmed = false
	}
	return nil
}

// report hands a report to e's Waiter and disarms the socket when the
// Waiter was not waiting: while it reads, input would report on, a
// wake-up of the poller per packet of a busy connection.
func (p *Poller) report(e *waiter) {
	e.armMu.Lock()
	defer e.armMu.Unlock()
	if e.w.Ready() || !e.added || e.disarmed {
		return
	}
	// A failure leaves it armed: the reports it then gives are hints,
	// which cost a wake-up each and lose nothing.
	if e.control(p, unix.EPOLL_CTL_MOD, &e.off) == nil {
		e.disarmed = true
	}
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
					p.report(e)
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
