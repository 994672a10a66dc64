//go:build !cgo || nolmdb

package lmdb

import "github.com/tidemark-io/tidemark/engine/driver"

func init() {
	driver.RegisterUnavailable(Name, "the LMDB engine needs cgo and was left out of this build "+
		"(built with CGO_ENABLED=0 or the nolmdb tag); rebuild with CGO_ENABLED=1 and a C compiler, "+
		"without -tags nolmdb, to include it")
}
