package rawconn

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Dial connects to addr (host:port, IPv4 or a name resolving to one) on
// a blocking socket with TCP_NODELAY set and returns its descriptor,
// which the caller closes. Its receive and send timeouts are timeout (0:
// none), which bounds the connect too.
func Dial(addr string, timeout time.Duration) (int, *net.TCPAddr, error) {
	return DialFrom(addr, nil, timeout)
}

// DialFrom is Dial from the local IPv4 address src (nil: the one the
// kernel picks), its port still the kernel's choice at connect.
//
// A fleet of connections from one address to one broker port takes an
// ephemeral port each, and the kernel's search for a free one walks the
// ports in use: at 19,000 connections it was 80% of the load generator's
// CPU. Connections from several addresses (127.0.0.0/8 is all loopback)
// may share ports, and the search stays short.
func DialFrom(addr string, src net.IP, timeout time.Duration) (int, *net.TCPAddr, error) {
	ta, err := net.ResolveTCPAddr("tcp4", addr)
	if err != nil {
		return -1, nil, err
	}
	var sa syscall.SockaddrInet4
	copy(sa.Addr[:], ta.IP.To4())
	sa.Port = ta.Port
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, nil, fmt.Errorf("socket: %w", err)
	}
	if timeout > 0 {
		if err := SetTimeout(fd, timeout); err != nil {
			syscall.Close(fd)
			return -1, nil, err
		}
	}
	if src != nil {
		if err := bindNoPort(fd, src); err != nil {
			syscall.Close(fd)
			return -1, nil, err
		}
	}
	if err := connect(fd, &sa); err != nil {
		syscall.Close(fd)
		return -1, nil, fmt.Errorf("connect %s: %w", addr, err)
	}
	if err := syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1); err != nil {
		syscall.Close(fd)
		return -1, nil, fmt.Errorf("TCP_NODELAY: %w", err)
	}
	return fd, ta, nil
}

// SetTimeout sets fd's receive and send timeouts to d, or clears them
// when d is 0: a blocking read or write past it fails with EAGAIN.
func SetTimeout(fd int, d time.Duration) error {
	var tv syscall.Timeval
	if d > 0 {
		tv = syscall.NsecToTimeval(d.Nanoseconds())
	}
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("SO_RCVTIMEO: %w", err)
	}
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_SNDTIMEO, &tv); err != nil {
		return fmt.Errorf("SO_SNDTIMEO: %w", err)
	}
	return nil
}

// connect connects fd to sa. A signal (the runtime preempting the
// goroutine) interrupts a blocking connect without stopping it: it goes
// on asynchronously, so connect then waits for the socket to be writable
// and takes the outcome from SO_ERROR.
func connect(fd int, sa syscall.Sockaddr) error {
	err := syscall.Connect(fd, sa)
	if !errors.Is(err, syscall.EINTR) {
		return err
	}
	for {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		if _, err := unix.Poll(pfd, -1); errors.Is(err, syscall.EINTR) {
			continue
		} else if err != nil {
			return err
		}
		soErr, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_ERROR)
		if err != nil {
			return err
		}
		if soErr != 0 {
			return syscall.Errno(soErr)
		}
		return nil
	}
}

// bindNoPort binds fd to address src and leaves the port to connect,
// which then picks one unique for the whole connection, not for the
// address alone (IP_BIND_ADDRESS_NO_PORT).
func bindNoPort(fd int, src net.IP) error {
	if err := syscall.SetsockoptInt(fd, syscall.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1); err != nil {
		return fmt.Errorf("IP_BIND_ADDRESS_NO_PORT: %w", err)
	}
	var sa syscall.SockaddrInet4
	copy(sa.Addr[:], src.To4())
	if err := syscall.Bind(fd, &sa); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	return nil
}
