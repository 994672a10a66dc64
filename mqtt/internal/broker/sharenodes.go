package broker

import (
	"context"
	"encoding/binary"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/topic"
	"github.com/tidemark-io/tidemark/table"
)

// Shared subscriptions across nodes sharing one store.
//
// Every node reads every message of the log, and its router picks, for
// each shared subscription a message matches, one of the node's own
// online members. With members of one share on several nodes, each of
// those nodes would deliver the message: the group would get it once per
// node. So each node publishes, in a shares record beside its presence
// record (see beat), how many online members it has for each share, and
// reads the other nodes' records at each beat: a message of a share goes
// to the node a hash of the message's log position picks among the nodes
// that publish members of it, weighted by their counts, the same pick on
// every node, and only that node offers it to one of its members.
//
// The counts a node acts on are the published ones, its own included, so
// that all nodes decide alike. They lag a member's arrival or departure
// by up to a beat on the node it is on and by up to two on the others:
// while two nodes' views differ, a message can reach two members of the
// group, or none (one picked for a node whose member has just gone, as a
// message is lost when no member is online). A node that stops cleanly
// deletes its shares record as it goes; one that dies is left out once
// its presence record has not changed for nodeGone.

// sharedStore reports whether other nodes may share the broker's store
// (it has a node id): what one node publishes must then reach the
// others' sessions through the store.
func (b *Broker) sharedStore() bool { return b.opts.NodeID != "" }

// shareView is what a node knows of the shares the nodes publish: for
// each share, the nodes with online members and their counts, sorted by
// node id.
type shareView map[topic.Share][]nodeShare

// nodeShare is one node's count of online members of a share.
type nodeShare struct {
	node string
	n    int
}

// sharesSuffix ends the id of a node's shares record in tableNodes,
// after the node id (which has no NUL byte).
const sharesSuffix = "\x00shares"

// maxSharesRecord bounds a node's shares record. Past it the shares that
// sort last are left out (and a warning logged): the other nodes then
// take this node for having no members of them, and deliver their
// messages themselves, so a share is never served twice, only less
// evenly.
const maxSharesRecord = 256 << 10

// appendShares encodes a shares record: the node's online members per
// share, in share order, as many as fit maxSharesRecord; it reports how
// many it left out.
func appendShares(dst []byte, shares map[topic.Share]int) ([]byte, int) {
	keys := make([]topic.Share, 0, len(shares))
	for s := range shares {
		keys = append(keys, s)
	}
	slices.SortFunc(keys, func(a, b topic.Share) int {
		if c := strings.Compare(a.Group, b.Group); c != 0 {
			return c
		}
		return strings.Compare(a.Filter, b.Filter)
	})
	for i, s := range keys {
		if len(dst)+len(s.Group)+len(s.Filter)+3*binary.MaxVarintLen64 > maxSharesRecord {
			return dst, len(keys) - i
		}
		dst = binary.AppendUvarint(dst, uint64(len(s.Group)))
		dst = append(dst, s.Group...)
		dst = binary.AppendUvarint(dst, uint64(len(s.Filter)))
		dst = append(dst, s.Filter...)
		dst = binary.AppendUvarint(dst, uint64(shares[s]))
	}
	return dst, 0
}

// encodeShares is the shares record of shares, nil when there are none;
// one cut to maxSharesRecord is logged, once per change of the count left
// out.
func (b *Broker) encodeShares(shares map[topic.Share]int) []byte {
	if len(shares) == 0 {
		return nil
	}
	v, left := appendShares(nil, shares)
	if left != b.sharesLeftOut {
		b.sharesLeftOut = left
		if left > 0 {
			b.log.Warn("too many shared subscriptions to publish to the other nodes; their messages go to members on other nodes only",
				"shares", len(shares), "left_out", left)
		}
	}
	return v
}

// decodeShares decodes a shares record; one it cannot read has none.
func decodeShares(v []byte) map[topic.Share]int {
	m := map[topic.Share]int{}
	for len(v) > 0 {
		var parts [2]string
		for i := range parts {
			l, n := binary.Uvarint(v)
			if n <= 0 || l > uint64(len(v)-n) {
				return nil
			}
			parts[i], v = string(v[n:n+int(l)]), v[n+int(l):]
		}
		c, n := binary.Uvarint(v)
		if n <= 0 {
			return nil
		}
		v = v[n:]
		m[topic.Share{Group: parts[0], Filter: parts[1]}] = int(c)
	}
	return m
}

// presenceSeen is when a node's presence record last changed, on this
// node's clock.
type presenceSeen struct {
	value []byte
	since time.Time
}

// readShareView reads every node's presence and shares records and makes
// the view of the shares served by several nodes, leaving out the nodes
// whose presence record has not changed for nodeGone. seen is the beat's
// memory of the presence records, updated here.
func (b *Broker) readShareView(ctx context.Context, seen map[string]*presenceSeen, now time.Time) (shareView, error) {
	records := map[string][]byte{}
	live := map[string]bool{}
	err := b.db.Range(ctx, tableNodes, "", func(r table.Record) bool {
		if node, ok := strings.CutSuffix(r.ID, sharesSuffix); ok {
			records[node] = r.Value
			return true
		}
		live[r.ID] = true
		ps := seen[r.ID]
		if ps == nil || string(ps.value) != string(r.Value) {
			seen[r.ID] = &presenceSeen{value: r.Value, since: now}
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	for id := range seen {
		if !live[id] {
			delete(seen, id)
		}
	}
	byShare := shareView{}
	for node, v := range records {
		ps := seen[node]
		if ps == nil || (node != b.opts.NodeID && now.Sub(ps.since) >= nodeGone) {
			continue
		}
		for s, n := range decodeShares(v) {
			if n > 0 {
				byShare[s] = append(byShare[s], nodeShare{node, n})
			}
		}
	}
	for _, nodes := range byShare {
		sort.Slice(nodes, func(i, j int) bool { return nodes[i].node < nodes[j].node })
	}
	return byShare, nil
}

// setShareView makes view the one routing acts on, logging the shares
// that came to be served by several nodes or ceased to be.
func (b *Broker) setShareView(view shareView) {
	old := b.shares.Load()
	for s, nodes := range view {
		if len(nodes) > 1 && (old == nil || len((*old)[s]) <= 1) {
			names := make([]string, len(nodes))
			for i, ns := range nodes {
				names[i] = ns.node
			}
			b.log.Info("shared subscription served by several nodes: each message goes to one of them",
				"group", s.Group, "filter", s.Filter, "nodes", names)
		}
	}
	if old != nil {
		for s, nodes := range *old {
			if len(nodes) > 1 && len(view[s]) <= 1 {
				b.log.Info("shared subscription served by one node again", "group", s.Group, "filter", s.Filter)
			}
		}
	}
	b.shares.Store(&view)
}

// servesShare reports whether this node delivers ev to its member of
// shared subscription s: when no node publishes members of the share
// (this node's have not been published yet), or when the pick for ev
// among the nodes that do is this one. A share published only by another
// node is that node's to serve, even while this node's own members are
// not published yet (or left out, see maxSharesRecord): never twice.
func (b *Broker) servesShare(ev table.Event, s topic.Subscription) bool {
	v := b.shares.Load()
	if v == nil {
		return true
	}
	nodes := (*v)[topic.Share{Group: s.Group, Filter: s.Filter}]
	if len(nodes) == 0 {
		return true
	}
	total := 0
	for _, ns := range nodes {
		total += ns.n
	}
	pick := int(sharePick(ev.Key, ev.Index, s.Group) % uint64(total))
	i := slices.IndexFunc(nodes, func(ns nodeShare) bool {
		pick -= ns.n
		return pick < 0
	})
	return nodes[i].node == b.opts.NodeID
}

// sharePick hashes a message's log position and a group name, with
// FNV-1a: the same on every node, whatever its build or run.
func sharePick(key engine.LogKey, index uint32, group string) uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	var pos [12]byte
	binary.BigEndian.PutUint64(pos[:8], uint64(key))
	binary.BigEndian.PutUint32(pos[8:], index)
	for _, c := range pos {
		h = (h ^ uint64(c)) * prime
	}
	for i := 0; i < len(group); i++ {
		h = (h ^ uint64(group[i])) * prime
	}
	return h
}
