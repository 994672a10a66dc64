//go:build !linux

package fleet

import (
	"errors"
	"fmt"
	"net"
	"time"
)

// Elsewhere than on Linux each device reads its connection in a goroutine
// of its own.

// link is a device's connection, nil when it has none.
type link struct{ nc net.Conn }

// pollers has nothing to keep where each device reads for itself.
type pollers struct{}

// ioTimeout bounds a device's connect and its wait for the answer.
const ioTimeout = 30 * time.Second

// connect dials the broker, says hello and waits for its answer, then
// reads the connection in a goroutine of its own.
func (d *device) connect(_ *pollers, addr string, subscribe bool) error {
	nc, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		return err
	}
	_ = nc.SetDeadline(time.Now().Add(ioTimeout))
	if _, err := nc.Write(d.hello(subscribe)); err != nil {
		nc.Close()
		return err
	}
	var in []byte
	buf := make([]byte, 4096)
	for {
		n, err := nc.Read(buf)
		if err != nil {
			nc.Close()
			return fmt.Errorf("reading CONNACK: %w", err)
		}
		in = append(in, buf[:n]...)
		rest, err := d.greeted(in, subscribe)
		if errors.Is(err, errShort) {
			continue
		}
		if err != nil {
			nc.Close()
			return err
		}
		in = rest
		break
	}
	_ = nc.SetDeadline(time.Time{})
	d.mu.Lock()
	d.rest = append(d.rest[:0], in...)
	d.link = link{nc: nc}
	d.mu.Unlock()
	go d.read(nc, buf)
	return nil
}

// read records and acknowledges what nc brings until it ends.
func (d *device) read(nc net.Conn, buf []byte) {
	var acks []byte
	for {
		d.mu.Lock()
		var took int
		var err error
		acks, took, err = d.receive(d.rest, acks[:0], time.Now())
		d.rest = append(d.rest[:0], d.rest[took:]...)
		d.mu.Unlock()
		if err != nil {
			return
		}
		if len(acks) > 0 {
			if _, err := nc.Write(acks); err != nil {
				return
			}
		}
		n, err := nc.Read(buf)
		if err != nil {
			return
		}
		d.mu.Lock()
		d.rest = append(d.rest, buf[:n]...)
		d.mu.Unlock()
	}
}

// closeAll closes every device's connection.
func (f *fleet) closeAll() {
	for _, d := range f.devs {
		d.mu.Lock()
		if d.link.nc != nil {
			d.link.nc.Close()
			d.link.nc = nil
		}
		d.rest = d.rest[:0]
		d.mu.Unlock()
	}
}
