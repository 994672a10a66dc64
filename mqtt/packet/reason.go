package packet

import "strconv"

// ReasonCode is an MQTT 5.0 reason code (spec section 2.4). Codes below 0x80
// report success, 0x80 and above report failure. Under 3.1.1 the codec maps
// them to and from the CONNACK return codes and SUBACK results.
type ReasonCode byte

// Reason codes of MQTT 5.0. Several codes share a value; the names say in
// which packet each meaning applies.
const (
	// Success: CONNACK, PUBACK, PUBREC, PUBREL, PUBCOMP, UNSUBACK, AUTH.
	Success ReasonCode = 0x00
	// NormalDisconnection: DISCONNECT.
	NormalDisconnection ReasonCode = 0x00
	// GrantedQoS0: SUBACK.
	GrantedQoS0 ReasonCode = 0x00
	// GrantedQoS1: SUBACK.
	GrantedQoS1 ReasonCode = 0x01
	// GrantedQoS2: SUBACK.
	GrantedQoS2 ReasonCode = 0x02
	// DisconnectWithWillMessage: DISCONNECT from a client that wants its Will
	// published.
	DisconnectWithWillMessage ReasonCode = 0x04
	// NoMatchingSubscribers: PUBACK, PUBREC.
	NoMatchingSubscribers ReasonCode = 0x10
	// NoSubscriptionExisted: UNSUBACK.
	NoSubscriptionExisted ReasonCode = 0x11
	// ContinueAuthentication: AUTH.
	ContinueAuthentication ReasonCode = 0x18
	// ReAuthenticate: AUTH.
	ReAuthenticate ReasonCode = 0x19
	// UnspecifiedError: CONNACK, PUBACK, PUBREC, SUBACK, UNSUBACK, DISCONNECT.
	UnspecifiedError ReasonCode = 0x80
	// MalformedPacket: CONNACK, DISCONNECT.
	MalformedPacket ReasonCode = 0x81
	// ProtocolError: CONNACK, DISCONNECT.
	ProtocolError ReasonCode = 0x82
	// ImplementationSpecificError: CONNACK, PUBACK, PUBREC, SUBACK, UNSUBACK,
	// DISCONNECT.
	ImplementationSpecificError ReasonCode = 0x83
	// UnsupportedProtocolVersion: CONNACK.
	UnsupportedProtocolVersion ReasonCode = 0x84
	// ClientIdentifierNotValid: CONNACK.
	ClientIdentifierNotValid ReasonCode = 0x85
	// BadUserNameOrPassword: CONNACK.
	BadUserNameOrPassword ReasonCode = 0x86
	// NotAuthorized: CONNACK, PUBACK, PUBREC, SUBACK, UNSUBACK, DISCONNECT.
	NotAuthorized ReasonCode = 0x87
	// ServerUnavailable: CONNACK.
	ServerUnavailable ReasonCode = 0x88
	// ServerBusy: CONNACK, DISCONNECT.
	ServerBusy ReasonCode = 0x89
	// Banned: CONNACK.
	Banned ReasonCode = 0x8A
	// ServerShuttingDown: DISCONNECT.
	ServerShuttingDown ReasonCode = 0x8B
	// BadAuthenticationMethod: CONNACK, DISCONNECT.
	BadAuthenticationMethod ReasonCode = 0x8C
	// KeepAliveTimeout: DISCONNECT.
	KeepAliveTimeout ReasonCode = 0x8D
	// SessionTakenOver: DISCONNECT.
	SessionTakenOver ReasonCode = 0x8E
	// TopicFilterInvalid: SUBACK, UNSUBACK, DISCONNECT.
	TopicFilterInvalid ReasonCode = 0x8F
	// TopicNameInvalid: CONNACK, PUBACK, PUBREC, DISCONNECT.
	TopicNameInvalid ReasonCode = 0x90
	// PacketIdentifierInUse: PUBACK, PUBREC, SUBACK, UNSUBACK.
	PacketIdentifierInUse ReasonCode = 0x91
	// PacketIdentifierNotFound: PUBREL, PUBCOMP.
	PacketIdentifierNotFound ReasonCode = 0x92
	// ReceiveMaximumExceeded: DISCONNECT.
	ReceiveMaximumExceeded ReasonCode = 0x93
	// TopicAliasInvalid: DISCONNECT.
	TopicAliasInvalid ReasonCode = 0x94
	// PacketTooLarge: CONNACK, DISCONNECT.
	PacketTooLarge ReasonCode = 0x95
	// MessageRateTooHigh: DISCONNECT.
	MessageRateTooHigh ReasonCode = 0x96
	// QuotaExceeded: CONNACK, PUBACK, PUBREC, SUBACK, DISCONNECT.
	QuotaExceeded ReasonCode = 0x97
	// AdministrativeAction: DISCONNECT.
	AdministrativeAction ReasonCode = 0x98
	// PayloadFormatInvalid: CONNACK, PUBACK, PUBREC, DISCONNECT.
	PayloadFormatInvalid ReasonCode = 0x99
	// RetainNotSupported: CONNACK, DISCONNECT.
	RetainNotSupported ReasonCode = 0x9A
	// QoSNotSupported: CONNACK, DISCONNECT.
	QoSNotSupported ReasonCode = 0x9B
	// UseAnotherServer: CONNACK, DISCONNECT.
	UseAnotherServer ReasonCode = 0x9C
	// ServerMoved: CONNACK, DISCONNECT.
	ServerMoved ReasonCode = 0x9D
	// SharedSubscriptionsNotSupported: SUBACK, DISCONNECT.
	SharedSubscriptionsNotSupported ReasonCode = 0x9E
	// ConnectionRateExceeded: CONNACK, DISCONNECT.
	ConnectionRateExceeded ReasonCode = 0x9F
	// MaximumConnectTime: DISCONNECT.
	MaximumConnectTime ReasonCode = 0xA0
	// SubscriptionIdentifiersNotSupported: SUBACK, DISCONNECT.
	SubscriptionIdentifiersNotSupported ReasonCode = 0xA1
	// WildcardSubscriptionsNotSupported: SUBACK, DISCONNECT.
	WildcardSubscriptionsNotSupported ReasonCode = 0xA2
)

var reasonNames = map[ReasonCode]string{
	0x00: "success",
	0x01: "granted QoS 1",
	0x02: "granted QoS 2",
	0x04: "disconnect with will message",
	0x10: "no matching subscribers",
	0x11: "no subscription existed",
	0x18: "continue authentication",
	0x19: "re-authenticate",
	0x80: "unspecified error",
	0x81: "malformed packet",
	0x82: "protocol error",
	0x83: "implementation specific error",
	0x84: "unsupported protocol version",
	0x85: "client identifier not valid",
	0x86: "bad user name or password",
	0x87: "not authorized",
	0x88: "server unavailable",
	0x89: "server busy",
	0x8A: "banned",
	0x8B: "server shutting down",
	0x8C: "bad authentication method",
	0x8D: "keep alive timeout",
	0x8E: "session taken over",
	0x8F: "topic filter invalid",
	0x90: "topic name invalid",
	0x91: "packet identifier in use",
	0x92: "packet identifier not found",
	0x93: "receive maximum exceeded",
	0x94: "topic alias invalid",
	0x95: "packet too large",
	0x96: "message rate too high",
	0x97: "quota exceeded",
	0x98: "administrative action",
	0x99: "payload format invalid",
	0x9A: "retain not supported",
	0x9B: "QoS not supported",
	0x9C: "use another server",
	0x9D: "server moved",
	0x9E: "shared subscriptions not supported",
	0x9F: "connection rate exceeded",
	0xA0: "maximum connect time",
	0xA1: "subscription identifiers not supported",
	0xA2: "wildcard subscriptions not supported",
}

// String returns the specification's name for the code (0x00 reads as
// "success", whatever the packet), or its hex value when the code is not
// defined.
func (c ReasonCode) String() string {
	if s, ok := reasonNames[c]; ok {
		return s
	}
	return "reason code 0x" + strconv.FormatUint(uint64(c), 16)
}

// IsError reports whether c signals a failure (0x80 and above).
func (c ReasonCode) IsError() bool { return c >= 0x80 }

// codeSet is a 256-bit membership set of reason codes.
type codeSet [4]uint64

func (s codeSet) has(c ReasonCode) bool { return s[c>>6]&(1<<(c&63)) != 0 }

func makeCodeSet(codes ...ReasonCode) codeSet {
	var s codeSet
	for _, c := range codes {
		s[c>>6] |= 1 << (c & 63)
	}
	return s
}

// The reason codes each 5.0 packet type may carry (spec 2.4 and the
// per-packet tables).
var (
	connackCodes = makeCodeSet(Success, UnspecifiedError, MalformedPacket, ProtocolError,
		ImplementationSpecificError, UnsupportedProtocolVersion, ClientIdentifierNotValid,
		BadUserNameOrPassword, NotAuthorized, ServerUnavailable, ServerBusy, Banned,
		BadAuthenticationMethod, TopicNameInvalid, PacketTooLarge, QuotaExceeded,
		PayloadFormatInvalid, RetainNotSupported, QoSNotSupported, UseAnotherServer,
		ServerMoved, ConnectionRateExceeded)
	pubackCodes = makeCodeSet(Success, NoMatchingSubscribers, UnspecifiedError,
		ImplementationSpecificError, NotAuthorized, TopicNameInvalid, PacketIdentifierInUse,
		QuotaExceeded, PayloadFormatInvalid)
	pubrelCodes = makeCodeSet(Success, PacketIdentifierNotFound)
	subackCodes = makeCodeSet(GrantedQoS0, GrantedQoS1, GrantedQoS2, UnspecifiedError,
		ImplementationSpecificError, NotAuthorized, TopicFilterInvalid, PacketIdentifierInUse,
		QuotaExceeded, SharedSubscriptionsNotSupported, SubscriptionIdentifiersNotSupported,
		WildcardSubscriptionsNotSupported)
	subackCodes311 = makeCodeSet(GrantedQoS0, GrantedQoS1, GrantedQoS2, UnspecifiedError)
	unsubackCodes  = makeCodeSet(Success, NoSubscriptionExisted, UnspecifiedError,
		ImplementationSpecificError, NotAuthorized, TopicFilterInvalid, PacketIdentifierInUse)
	disconnectCodes = makeCodeSet(NormalDisconnection, DisconnectWithWillMessage,
		UnspecifiedError, MalformedPacket, ProtocolError, ImplementationSpecificError,
		NotAuthorized, ServerBusy, ServerShuttingDown, BadAuthenticationMethod, KeepAliveTimeout,
		SessionTakenOver, TopicFilterInvalid, TopicNameInvalid, ReceiveMaximumExceeded,
		TopicAliasInvalid, PacketTooLarge, MessageRateTooHigh, QuotaExceeded,
		AdministrativeAction, PayloadFormatInvalid, RetainNotSupported, QoSNotSupported,
		UseAnotherServer, ServerMoved, SharedSubscriptionsNotSupported, ConnectionRateExceeded,
		MaximumConnectTime, SubscriptionIdentifiersNotSupported,
		WildcardSubscriptionsNotSupported)
	authCodes = makeCodeSet(Success, ContinueAuthentication, ReAuthenticate)
)

// The 3.1.1 CONNACK return codes (spec 3.1.1 table 3.1) and the 5.0 reason
// codes they correspond to.
var connackV311 = [...]ReasonCode{
	0: Success,
	1: UnsupportedProtocolVersion,
	2: ClientIdentifierNotValid,
	3: ServerUnavailable,
	4: BadUserNameOrPassword,
	5: NotAuthorized,
}

// ConnackReturnCode311 returns the 3.1.1 CONNACK return code that expresses
// c, and false when 3.1.1 has none; a 3.1.1 server must then close the
// connection without a CONNACK [MQTT-3.2.2-6 in 3.1.1]. ServerBusy maps to
// "server unavailable" (3).
func ConnackReturnCode311(c ReasonCode) (byte, bool) {
	if c == ServerBusy {
		return 3, true
	}
	for i, rc := range connackV311 {
		if rc == c {
			return byte(i), true
		}
	}
	return 0, false
}
