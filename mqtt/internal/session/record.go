// Package session holds what the broker stores of an MQTT session and
// where it stores it: the session record (its subscriptions, acknowledged
// checkpoint over the message log, will and packet ids in flight), the
// record of an outbound QoS 2 exchange, their stored forms, and the
// layout of the session tables and their indexes. Package mqtt decides
// when a session is written, resumed, taken over or discarded; this
// package only says what is written, and where.
//
// The stored forms are a compatibility promise: a record written by any
// earlier version of the broker, binary or JSON, decodes here to the same
// record, and Encode writes the same bytes as the versions since the
// binary form came in, so a data directory written by any of them opens.
//
// The indexes beside the session table (the checkpoint, recovery and
// expiry indexes) are unchecked state written in the commit that writes
// the record (Put), so they never miss a stored session's current state;
// an entry may outlive what it stood for, and every reader checks the
// record behind it (see Table).
package session

import (
	"time"

	"github.com/tidemark-io/tidemark/mqtt/internal/logpos"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/mqtt/topic"
)

// NeverExpires is the 5.0 session expiry that means "never"; 3.1.1
// persistent sessions are stored with it.
const NeverExpires = 0xFFFFFFFF

// Record is what the broker persists per client id. Its JSON tags are
// the stored form of earlier versions, still read (see Decode).
type Record struct {
	Version packet.Version `json:"v"`
	// Expiry is the session expiry interval in seconds (NeverExpires for
	// 3.1.1 persistent sessions).
	Expiry uint32 `json:"expiry"`
	// Online is set while a connection holds the session; a session found
	// online at startup belonged to a broker that crashed.
	Online bool `json:"online,omitempty"`
	// Node and Conn name the broker node and the connection holding the
	// session; Claimed is set while a connection on Node waits for the
	// previous holder on another node to hand the session over.
	Node    string `json:"node,omitempty"`
	Conn    string `json:"conn,omitempty"`
	Claimed bool   `json:"claimed,omitempty"`
	// Rowless says the session holds no rows in StagedTable, OutTable or
	// DoneTable, so a reconnect need not look for any. Only the write
	// that takes the session offline sets it, on a broker not sharing its
	// store, when the connection that held it knows it leaves none; the
	// write that brings the session online clears it, before any row of
	// the new connection is written, and every other write keeps it, as
	// only a connection holding the session writes its rows.
	Rowless bool `json:"rowless,omitempty"`
	// DisconnectedAt is when the session went offline (Unix ms).
	DisconnectedAt int64 `json:"disc,omitempty"`
	// Subs are the session's subscriptions.
	Subs []Sub `json:"subs,omitempty"`
	// Checkpoint is the session's acknowledged position in the message
	// log, per partition: a resume replays what is above it.
	Checkpoint logpos.Vec `json:"cp"`
	// SentHigh is the furthest log position ever sent to the session,
	// per partition: a re-send at or below it carries the DUP flag.
	SentHigh logpos.Vec `json:"sent"`
	// Will is the session's will, nil when it has none.
	Will *Will `json:"will,omitempty"`
	// NextPI is the next packet id the session's sender hands out.
	NextPI uint16 `json:"pi,omitempty"`
	// Q1 is the QoS 1 deliveries unacknowledged when the record was
	// written, so a re-send after a reconnect or restart keeps the packet
	// id [MQTT-4.4.0-1]. Exact across a disconnect or a clean stop; after a
	// crash, deliveries sent since the last checkpoint write get new ids.
	Q1 []Q1Slot `json:"q1,omitempty"`

	// indexed is the checkpoint the checkpoint index holds an entry for,
	// as far as this copy knows (hasIndexed), and flagged whether the
	// recovery index may hold one: Put moves the entries along (see
	// Index).
	indexed    logpos.Vec
	hasIndexed bool
	flagged    bool
	// indexedAt is when Index last wrote the entries in full (zero for a
	// copy read from the store), and lazyIndex how long the next Put may
	// leave them as they are (see IndexLazily).
	indexedAt time.Time
	lazyIndex time.Duration
	// shares are the shares the share-members index holds entries of
	// for this session, as far as this copy knows.
	shares []topic.Share
}

// Q1Slot is one unacknowledged QoS 1 delivery: its log position and
// packet id.
type Q1Slot struct {
	Pos logpos.Pos `json:"pos"`
	PI  uint16     `json:"pi"`
}

// Sub is the stored form of one subscription of a session.
type Sub struct {
	Filter string `json:"f"`
	Group  string `json:"g,omitempty"`
	QoS    byte   `json:"q"`
	NL     bool   `json:"nl,omitempty"`
	RAP    bool   `json:"rap,omitempty"`
	RH     byte   `json:"rh,omitempty"`
	ID     uint32 `json:"id,omitempty"`
	// Since is the log position a plain subscription was made at, kept
	// while the checkpoint is below it: messages below it are not the
	// subscription's to deliver.
	Since *logpos.Vec `json:"s,omitempty"`
	// Pos says its deliveries carry their log position (PropPosition):
	// it was made with a replay.
	Pos bool `json:"pos,omitempty"`
}

// Subscription returns the subscription of client that s stores.
func (s Sub) Subscription(client string) topic.Subscription {
	return topic.Subscription{Client: client, Filter: s.Filter, Group: s.Group, QoS: s.QoS,
		NoLocal: s.NL, RetainAsPublished: s.RAP, RetainHandling: s.RH, ID: s.ID}
}

// SubOf returns the stored form of s, without the log positions (Since,
// Pos) that only the session's sender knows.
func SubOf(s topic.Subscription) Sub {
	return Sub{Filter: s.Filter, Group: s.Group, QoS: s.QoS, NL: s.NoLocal, RAP: s.RetainAsPublished, RH: s.RetainHandling, ID: s.ID}
}

// Will is a session's stored will.
type Will struct {
	Msg   []byte `json:"msg"` // the will message's stored form (mqtt.Message)
	Delay uint32 `json:"delay,omitempty"`
}

// Expired reports whether the session is offline and its expiry interval
// has passed at now.
func (s *Record) Expired(now time.Time) bool {
	return !s.Online && s.Expiry != NeverExpires && s.DisconnectedAt > 0 &&
		now.UnixMilli() >= s.DisconnectedAt+int64(s.Expiry)*1000
}

// Deadline returns when an offline session expires (Unix ms); false for
// one that is online or never expires.
func (s *Record) Deadline() (int64, bool) {
	if s.Online || s.Expiry == NeverExpires || s.DisconnectedAt <= 0 {
		return 0, false
	}
	return s.DisconnectedAt + int64(s.Expiry)*1000, true
}

// NeedsRecovery reports whether a restart must look at s: it is online
// (a broker that stops cleanly leaves none so) or holds a will.
func (s *Record) NeedsRecovery() bool { return s.Online || s.Will != nil }

// OutRecord is the stored form of an outbound QoS 2 exchange in flight:
// one record per exchange, written before its PUBLISH and again after its
// PUBREC, so a reconnect or restart resumes it where it stood.
type OutRecord struct {
	PI    uint16     `json:"pi"`
	State byte       `json:"state"` // the exchange's state, as package mqtt numbers it
	Pos   logpos.Pos `json:"pos"`
	Msg   []byte     `json:"msg"` // the message's stored form (mqtt.Message)
}
