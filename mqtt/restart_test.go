package mqtt_test

import (
	// Every engine built into this binary runs the restart test; pebble
	// runs the rest.
	_ "github.com/tidemark-io/tidemark/engine/badger"
	_ "github.com/tidemark-io/tidemark/engine/jetstream"
	_ "github.com/tidemark-io/tidemark/engine/lmdb"
	_ "github.com/tidemark-io/tidemark/engine/pebble"
)
