package mqtt

import "github.com/tidemark-io/tidemark/mqtt/internal/message"

// ErrCorruptMessage reports a stored message that cannot be decoded.
var ErrCorruptMessage = message.ErrCorrupt

// UserProperty is one 5.0 user property; order and repeats are kept.
type UserProperty = message.UserProperty

// MessageTable is the table whose log entries are the broker's QoS 1
// and 2 messages: one per publication, its id the topic, its value a
// Message (see UnmarshalBinary). An application that embeds the broker
// can follow it with the table layer (table.DB.Follow with
// IncludeSuperseded, since every message is an entry of its own).
const MessageTable = message.LogTable

// Message is an application message as the broker stores and routes it:
// what a PUBLISH carried, plus who published it and when it expires. Its
// stored form (MarshalBinary, UnmarshalBinary) is what the log, the
// retained store and a session's will hold.
type Message = message.Message
