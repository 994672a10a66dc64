//go:build nopebble

package pebble

import "github.com/tidemark-io/tidemark/engine/driver"

func init() {
	driver.RegisterUnavailable(Name, "the Pebble engine was left out of this build by the nopebble tag; "+
		"rebuild without -tags nopebble to include it")
}
