//go:build linux

package fleet

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tidemark-io/tidemark/bench/internal/rawconn"
)

// On Linux the fleet's sockets are blocking ones read through epoll by a
// few pollers, not a goroutine each on the runtime's poller: the load
// generator then costs little more per packet than its system calls, so
// that the brokers, which share the machine with it, get most of it.

// link is a device's socket: its descriptor, -1 when it has none.
type link struct{ fd int }

// ioTimeout bounds a device's connect and each blocking read or write.
const ioTimeout = 30 * time.Second

// pollers is the client's read side: each device's socket is in one of
// them once it connected.
type pollers struct {
	mu   sync.Mutex
	ps   []*poller
	next int
	wg   sync.WaitGroup
	stop atomic.Bool
}

// poller reads the sockets in its epoll set.
type poller struct {
	ep   int
	devs []*device // by the index its sockets carry in their events
	mu   sync.Mutex
}

// nPollers is how many pollers read the fleet's sockets: one per core of
// the machine the benchmark was written for.
const nPollers = 2

// connect dials the broker, says hello and waits for its answer, then
// hands the socket to a poller.
func (d *device) connect(ps *pollers, addr string, subscribe bool) error {
	fd, _, err := rawconn.DialFrom(addr, d.src, ioTimeout)
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			syscall.Close(fd)
		}
	}()
	if err := writeAll(fd, d.hello(subscribe)); err != nil {
		return err
	}
	var in []byte
	buf := make([]byte, 512)
	for {
		n, err := syscall.Read(fd, buf)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading CONNACK (%d bytes in): %w", len(in), err)
		}
		if n == 0 {
			return fmt.Errorf("reading CONNACK (%d bytes in): the broker closed the connection", len(in))
		}
		in = append(in, buf[:n]...)
		rest, err := d.greeted(in, subscribe)
		if errors.Is(err, errShort) {
			continue
		}
		if err != nil {
			return err
		}
		in = rest
		break
	}
	d.mu.Lock()
	// Deliveries read with the answer (a reconnect's redeliveries) are
	// taken before the poller reads more.
	acks, took, err := d.receive(in, nil, time.Now())
	d.rest = append(d.rest[:0], in[took:]...)
	d.link = link{fd: fd}
	d.mu.Unlock()
	if err != nil {
		return err
	}
	if err := writeAll(fd, acks); err != nil {
		return err
	}
	ok = true
	return ps.add(d, fd)
}

func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := syscall.Write(fd, b)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("write: %w", err)
		}
		b = b[n:]
	}
	return nil
}

// add puts device d's socket fd into a poller's set, starting the
// pollers on first use.
func (ps *pollers) add(d *device, fd int) error {
	ps.mu.Lock()
	if ps.ps == nil {
		ps.stop.Store(false)
		for range nPollers {
			ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
			if err != nil {
				ps.mu.Unlock()
				return fmt.Errorf("epoll: %w", err)
			}
			p := &poller{ep: ep}
			ps.ps = append(ps.ps, p)
			ps.wg.Add(1)
			go ps.run(p)
		}
	}
	p := ps.ps[ps.next%len(ps.ps)]
	ps.next++
	ps.mu.Unlock()
	p.mu.Lock()
	idx := len(p.devs)
	p.devs = append(p.devs, d)
	p.mu.Unlock()
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP, Fd: int32(fd), Pad: int32(idx)}
	if err := syscall.EpollCtl(p.ep, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return fmt.Errorf("epoll add: %w", err)
	}
	return nil
}

// run reads the sockets of p as they have input, until the pollers stop.
func (ps *pollers) run(p *poller) {
	defer ps.wg.Done()
	events := make([]syscall.EpollEvent, 256)
	buf := make([]byte, 64<<10)
	var acks []byte
	for !ps.stop.Load() {
		// A timeout lets a stop be seen without a wake-up descriptor.
		n, err := syscall.EpollWait(p.ep, events, 50)
		if err != nil {
			continue // EINTR
		}
		for _, ev := range events[:n] {
			p.mu.Lock()
			d := p.devs[ev.Pad]
			p.mu.Unlock()
			acks = d.poll(int(ev.Fd), p.ep, buf, acks[:0])
		}
	}
}

// poll reads what socket fd of d has, records it and acknowledges it; a
// socket the broker closed leaves the poller's set.
func (d *device) poll(fd, ep int, buf, acks []byte) []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	in := append(buf[:0], d.rest...)
	n, err := syscall.Read(fd, buf[len(in):])
	if errors.Is(err, syscall.EINTR) || errors.Is(err, syscall.EAGAIN) {
		return acks
	}
	if err != nil || n == 0 {
		_ = syscall.EpollCtl(ep, syscall.EPOLL_CTL_DEL, fd, nil)
		return acks
	}
	in = buf[:len(in)+n]
	acks, took, err := d.receive(in, acks, time.Now())
	d.rest = append(d.rest[:0], in[took:]...)
	if err == nil && len(acks) > 0 {
		err = writeAll(fd, acks)
	}
	if err != nil {
		_ = syscall.EpollCtl(ep, syscall.EPOLL_CTL_DEL, fd, nil)
	}
	return acks
}

// closeAll stops the pollers, then closes every device's socket: no
// poller reads a descriptor after it was closed (and possibly reused).
func (f *fleet) closeAll() {
	ps := &f.readers
	ps.stop.Store(true)
	ps.wg.Wait()
	ps.mu.Lock()
	for _, p := range ps.ps {
		syscall.Close(p.ep)
	}
	ps.ps, ps.next = nil, 0
	ps.mu.Unlock()
	for _, d := range f.devs {
		d.mu.Lock()
		if d.link.fd > 0 {
			syscall.Close(d.link.fd)
		}
		d.link = link{fd: -1}
		d.rest = d.rest[:0]
		d.mu.Unlock()
	}
}
