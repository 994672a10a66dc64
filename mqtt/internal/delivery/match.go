package delivery

import (
	"slices"

	"github.com/tidemark-io/tidemark/mqtt/internal/logpos"
	"github.com/tidemark-io/tidemark/mqtt/internal/message"
	"github.com/tidemark-io/tidemark/mqtt/topic"
)

// Matching a message from the log against the session's plain
// subscriptions: which of them it reaches, from which log position each
// one matches, and which ask for positions on their deliveries.

// match returns the delivery QoS, subscription identifiers and retain-as-
// published of the session's plain subscriptions matching m, at log
// position pos; o.mu held.
func (o *Session) match(m *message.Message, pos logpos.Pos) (qos byte, ids []uint32, rap, ok bool) {
	for _, s := range o.subs {
		if s.Group != "" || !topic.Match(s.Filter, m.Topic) || (s.NoLocal && m.From == o.client) {
			continue
		}
		if since, ok := o.since.get(s.Filter); ok && since.Covers(pos) {
			continue
		}
		if len(o.replays) > 0 && o.heldLocked(s.Filter, pos.C) {
			continue // the replay delivers it
		}
		ok = true
		qos = max(qos, min(s.QoS, m.QoS))
		if s.ID != 0 {
			ids = append(ids, s.ID)
		}
		rap = rap || s.RetainAsPublished
	}
	return qos, ids, rap, ok
}

// wantsPosLocked reports whether a plain subscription matching name asked
// for log positions on its deliveries; o.mu held.
func (o *Session) wantsPosLocked(name string) bool {
	for _, s := range o.subs {
		if s.Group == "" && o.posFilters[s.Filter] && topic.Match(s.Filter, name) {
			return true
		}
	}
	return false
}

// sinceMark is a plain subscription filter that matches only messages
// after log position pos.
type sinceMark struct {
	filter string
	pos    logpos.Vec
}

// sinceMarks holds a session's since positions. A session has few
// subscriptions, and only those made while it was online have a mark, so
// a slice searched in order costs less than a map.
type sinceMarks []sinceMark

func (s sinceMarks) get(filter string) (logpos.Vec, bool) {
	for _, m := range s {
		if m.filter == filter {
			return m.pos, true
		}
	}
	return logpos.Vec{}, false
}

func (s *sinceMarks) set(filter string, pos logpos.Vec) {
	for i := range *s {
		if (*s)[i].filter == filter {
			(*s)[i].pos = pos
			return
		}
	}
	*s = append(*s, sinceMark{filter, pos})
}

func (s *sinceMarks) del(filter string) {
	*s = slices.DeleteFunc(*s, func(m sinceMark) bool { return m.filter == filter })
	if len(*s) == 0 {
		*s = nil
	}
}
