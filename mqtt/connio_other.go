//go:build !unix

package mqtt

import (
	"errors"
	"io"
	"syscall"
)

// rawSocket returns nil: connReader reads through src and waits for input
// in its small buffer.
func rawSocket(io.Reader) syscall.RawConn { return nil }

func (cr *connReader) readSocket() (int, error) { return 0, errors.ErrUnsupported }
