package broker

// storeGoroutines is how many long-lived goroutines run the store calls of
// connection setup (see onStore). Those calls do not wait for syncs, so a
// few per core keep the engine busy; more connections wait their turn.
const storeGoroutines = 16

// onStore runs fn, the store calls of a connection's CONNECT or SUBSCRIBE
// or of a session's checkpoint, on one of the broker's store goroutines
// and waits for it: their stacks grow once for the engine's deep read and
// commit paths, not once per connection (see package workers). fn runs
// inline once the broker is closing.
func (b *Broker) onStore(fn func()) { b.store.Do(fn) }

// postStore runs fn on one of the broker's store goroutines without
// waiting for it: a session's timed checkpoint, which needs no goroutine
// of its own while it waits its turn (see workers.Calls.Post).
func (b *Broker) postStore(fn func()) { b.store.Post(fn) }
