package mqtt

// storeGoroutines is how many long-lived goroutines run the store calls of
// connection setup (see onStore). Those calls do not wait for syncs, so a
// few per core keep the engine busy; more connections wait their turn.
const storeGoroutines = 16

// storeJob is one run of store calls handed to a store goroutine; done is
// closed once it ran.
type storeJob struct {
	fn   func()
	done chan struct{}
}

// onStore runs fn, the store calls of a connection's CONNECT or SUBSCRIBE
// or of a session's checkpoint, on one of the broker's store goroutines
// and waits for it.
//
// The engine's read and commit paths run deep. A connection goroutine
// making those calls itself grows its stack from the minimum, copying it
// several times, for every connection of a connect storm (a quarter of the
// CPU of a storm went to it), and the collector shrinks it again once the
// connection idles. The store goroutines live as long as the broker, so
// their stacks grow once. fn runs inline once the broker is closing.
func (b *Broker) onStore(fn func()) {
	j := storeJob{fn: fn, done: make(chan struct{})}
	select {
	case b.store <- j:
		<-j.done
	case <-b.ctx.Done():
		fn()
	}
}

// storeLoop is one store goroutine.
func (b *Broker) storeLoop() {
	defer b.wg.Done()
	for {
		select {
		case j := <-b.store:
			j.fn()
			close(j.done)
		case <-b.ctx.Done():
			return
		}
	}
}
