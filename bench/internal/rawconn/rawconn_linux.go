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
