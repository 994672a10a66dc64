//go:build !unix

package netio

import (
	"errors"
	"io"
	"syscall"
)

// rawSocket returns nil: Reader reads through src and waits for input
// in its small buffer.
func rawSocket(io.Reader) syscall.RawConn { return nil }

func (cr *Reader) readSocket() (int, error) { return 0, errors.ErrUnsupported }
