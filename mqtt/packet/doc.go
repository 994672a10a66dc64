// Package packet is the MQTT 3.1.1 and 5.0 wire codec: one Go type per
// control packet, a Reader that decodes one packet at a time from a
// connection, and encoders that append a packet to a byte slice.
//
// # Versions
//
// A connection speaks one protocol level, fixed by its CONNECT. A Reader
// starts without a level, accepts only CONNECT until it has one, and adopts
// the level of the first CONNECT it decodes (a client side sets it with
// SetVersion). Encoders take the level explicitly. Fields that a level cannot
// express are dropped when encoding for it (properties, the reason codes of
// acknowledgements and DISCONNECT under 3.1.1); a value that must not be
// dropped silently (a CONNACK code without a 3.1.1 equivalent, AUTH under
// 3.1.1) is an encoding error.
//
// # Validation and errors
//
// Decoding enforces the normative wire-format rules of both specifications:
// remaining-length encoding, reserved flag bits, QoS and DUP, UTF-8 strings
// ([MQTT-1.5.4-1..3]), topic names and filters, non-zero packet identifiers,
// property placement and repetition, subscription options, CONNECT flags and
// the maximum packet size. Every such failure is a *Error carrying the 5.0
// reason code to report to the peer; it wraps one of the sentinels
// (ErrMalformed, ErrProtocol, ...) for errors.Is. Any other error from a
// Reader comes from the underlying io.Reader (io.EOF between packets,
// io.ErrUnexpectedEOF inside one). No input panics. A Reader never holds
// more memory for a packet's bytes than about twice what actually arrived,
// bounded by the maximum packet size, and the decoded structures of a
// packet take a small multiple of its size at worst (many one-character
// filters or empty user properties), so the maximum packet size bounds the
// memory one packet can cost.
//
// Rules that depend on session state (first packet is CONNECT, packet
// direction, topic alias range, receive maximum, in-flight identifiers)
// belong to the broker, not to this package.
//
// # Ownership
//
// A *Publish returned by a Reader owns a buffer taken from that Reader's
// free list: its Payload and Properties.CorrelationData point into it, and
// its Properties.User and SubscriptionIDs slices are reused too. The packet
// and every slice in it stay valid until the caller calls Release, after
// which none may be touched; a packet that is never released is simply
// garbage collected. Release may be called from any goroutine. Strings are
// always safe to keep: they are copies, shared through a small per-Reader
// cache so that a client publishing to the same topics costs no allocation.
// Every other packet type owns all of its memory outright.
package packet
