//go:build nojetstream

package jetstream

import "github.com/tidemark-io/tidemark/engine/driver"

func init() {
	driver.RegisterUnavailable(Name, "the JetStream engine was left out of this build by the nojetstream tag; "+
		"rebuild without -tags nojetstream to include it")
}
