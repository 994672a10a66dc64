//go:build nobadger

package badger

import "github.com/tidemark-io/tidemark/engine/driver"

func init() {
	driver.RegisterUnavailable(Name, "the Badger engine was left out of this build by the nobadger tag; "+
		"rebuild without -tags nobadger to include it")
}
