// Package topicalias is the table of topic aliases the broker uses
// towards a 5.0 client: which alias each topic has and whether the client
// knows it yet.
//
// Its invariant: a PUBLISH carries an alias without its topic only once a
// PUBLISH carrying both was written to the socket, so the client always
// holds the mapping an alias-only PUBLISH needs; and no more aliases are
// handed out than the client's Topic Alias Maximum.
package topicalias

import (
	"sync"

	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// Out holds the topic aliases a connection uses towards a 5.0 client
// that accepts them (its CONNECT's Topic Alias Maximum). A topic gets the
// next free alias the first time it is sent, while any is left, and keeps
// it for the connection's life. A PUBLISH carries the alias alone only
// once a PUBLISH carrying the topic with the alias was written to the
// socket: one dropped before (too large for the client) or still waiting
// behind a commit leaves the client without the mapping, so until then
// every PUBLISH of the topic carries both, which sets the same mapping
// again.
//
// The zero Out is empty and ready; it is safe for concurrent use.
type Out struct {
	mu sync.Mutex
	of map[string]*outAlias
}

type outAlias struct {
	id    uint16
	known bool // a PUBLISH with the topic and the alias was written
}

// Apply sets p's topic alias, if the client takes aliases (max > 0) and
// one is or can be given to p's topic, and drops the topic when the client
// knows the alias.
func (a *Out) Apply(p *packet.Publish, max uint16) {
	if max == 0 || p.Topic == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	al := a.of[p.Topic]
	if al == nil {
		if len(a.of) >= int(max) {
			return
		}
		if a.of == nil {
			a.of = map[string]*outAlias{}
		}
		al = &outAlias{id: uint16(len(a.of) + 1)}
		a.of[p.Topic] = al
	}
	p.Properties.SetTopicAlias(al.id)
	if al.known {
		p.Topic = ""
	}
}

// Written records that a PUBLISH carrying topic with its alias reached
// the socket's write buffer, after which packets are written in order.
func (a *Out) Written(topic string) {
	a.mu.Lock()
	if al := a.of[topic]; al != nil {
		al.known = true
	}
	a.mu.Unlock()
}
