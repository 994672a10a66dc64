package packet

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	pv5 "github.com/eclipse/paho.golang/packets"
	pv3 "github.com/eclipse/paho.mqtt.golang/packets"
	"pgregory.net/rapid"
)

// Differential tests: generated packets are encoded by this codec and
// decoded by an independent one, and the other way round, and the fields
// compared. paho.golang's packets speak 5.0 only; paho.mqtt.golang's speak
// 3.1.1.

func TestDifferentialPaho5(t *testing.T) {
	t.Run("ours to paho", func(t *testing.T) {
		checkMany(t, func(t *rapid.T) {
			p := genPacket(genCfg{v: V5, paho: true}).Draw(t, "packet")
			b := encode(t, p, V5)
			r := bytes.NewReader(b)
			cp, err := pv5.ReadPacket(r)
			if err != nil {
				t.Fatalf("paho cannot read %v: %v\n% x", p.Type(), err, b)
			}
			if r.Len() != 0 {
				t.Fatalf("paho left %d bytes", r.Len())
			}
			got, err := fromPaho5(cp.Content)
			if err != nil {
				t.Fatal(err)
			}
			if !equalPackets(got, downgrade(p, V5)) {
				t.Fatalf("paho read:\n got %#v\nwant %#v", canon(got), downgrade(p, V5))
			}
		})
	})
	t.Run("paho to ours", func(t *testing.T) {
		checkMany(t, func(t *rapid.T) {
			p := genPacket(genCfg{v: V5, paho: true, pahoWill: true}).Draw(t, "packet")
			var buf bytes.Buffer
			if _, err := toPaho5(p).WriteTo(&buf); err != nil {
				t.Fatal(err)
			}
			got := decodeOne(t, buf.Bytes(), V5)
			if !equalPackets(got, downgrade(p, V5)) {
				t.Fatalf("we read paho's %v:\n got %#v\nwant %#v\n% x", p.Type(), canon(got), downgrade(p, V5), buf.Bytes())
			}
		})
	})
}

func TestDifferentialPaho311(t *testing.T) {
	t.Run("ours to paho", func(t *testing.T) {
		checkMany(t, func(t *rapid.T) {
			p := genPacket(genCfg{v: V311}).Draw(t, "packet")
			b := encode(t, p, V311)
			r := bytes.NewReader(b)
			cp, err := pv3.ReadPacket(r)
			if err != nil {
				t.Fatalf("paho cannot read %v: %v\n% x", p.Type(), err, b)
			}
			if r.Len() != 0 {
				t.Fatalf("paho left %d bytes", r.Len())
			}
			got, err := fromPaho3(cp)
			if err != nil {
				t.Fatal(err)
			}
			if !equalPackets(got, downgrade(p, V311)) {
				t.Fatalf("paho read:\n got %#v\nwant %#v", canon(got), downgrade(p, V311))
			}
		})
	})
	t.Run("paho to ours", func(t *testing.T) {
		checkMany(t, func(t *rapid.T) {
			p := genPacket(genCfg{v: V311}).Draw(t, "packet")
			var buf bytes.Buffer
			if err := toPaho3(p).Write(&buf); err != nil {
				t.Fatal(err)
			}
			got := decodeOne(t, buf.Bytes(), V311)
			if !equalPackets(got, downgrade(p, V311)) {
				t.Fatalf("we read paho's %v:\n got %#v\nwant %#v", p.Type(), canon(got), downgrade(p, V311))
			}
			// Neither codec has a choice of layout under 3.1.1, so the
			// bytes must match too.
			if b := encode(t, p, V311); !bytes.Equal(b, buf.Bytes()) {
				t.Fatalf("%v encodings differ:\n ours % x\npaho % x", p.Type(), b, buf.Bytes())
			}
		})
	})
}

func toPahoProps(p *Properties) *pv5.Properties {
	out := &pv5.Properties{}
	u8 := func(id PropertyID, v byte) *byte {
		if !p.Has(id) {
			return nil
		}
		return &v
	}
	u16 := func(id PropertyID, v uint16) *uint16 {
		if !p.Has(id) {
			return nil
		}
		return &v
	}
	u32 := func(id PropertyID, v uint32) *uint32 {
		if !p.Has(id) {
			return nil
		}
		return &v
	}
	out.PayloadFormat = u8(PropPayloadFormat, p.PayloadFormat)
	out.MessageExpiry = u32(PropMessageExpiry, p.MessageExpiry)
	out.ContentType = p.ContentType
	out.ResponseTopic = p.ResponseTopic
	out.CorrelationData = p.CorrelationData
	if len(p.SubscriptionIDs) > 0 {
		id := int(p.SubscriptionIDs[0])
		out.SubscriptionIdentifier = &id
	}
	out.SessionExpiryInterval = u32(PropSessionExpiry, p.SessionExpiry)
	out.AssignedClientID = p.AssignedClientID
	out.ServerKeepAlive = u16(PropServerKeepAlive, p.ServerKeepAlive)
	out.AuthMethod = p.AuthMethod
	out.AuthData = p.AuthData
	out.RequestProblemInfo = u8(PropRequestProblemInfo, p.RequestProblemInfo)
	out.WillDelayInterval = u32(PropWillDelay, p.WillDelay)
	out.RequestResponseInfo = u8(PropRequestResponseInfo, p.RequestResponseInfo)
	out.ResponseInfo = p.ResponseInfo
	out.ServerReference = p.ServerReference
	out.ReasonString = p.ReasonString
	out.ReceiveMaximum = u16(PropReceiveMaximum, p.ReceiveMaximum)
	out.TopicAliasMaximum = u16(PropTopicAliasMaximum, p.TopicAliasMaximum)
	out.TopicAlias = u16(PropTopicAlias, p.TopicAlias)
	out.MaximumQOS = u8(PropMaximumQoS, p.MaximumQoS)
	out.RetainAvailable = u8(PropRetainAvailable, p.RetainAvailable)
	out.MaximumPacketSize = u32(PropMaximumPacketSize, p.MaximumPacketSize)
	out.WildcardSubAvailable = u8(PropWildcardSubAvailable, p.WildcardSubAvailable)
	out.SubIDAvailable = u8(PropSubIDAvailable, p.SubIDAvailable)
	out.SharedSubAvailable = u8(PropSharedSubAvailable, p.SharedSubAvailable)
	for _, u := range p.User {
		out.User = append(out.User, pv5.User{Key: u.Key, Value: u.Value})
	}
	return out
}

// fromPahoProps converts back; paho marks a string or binary property
// absent by leaving it empty.
func fromPahoProps(pp *pv5.Properties) Properties {
	var p Properties
	if pp == nil {
		return p
	}
	if pp.PayloadFormat != nil {
		p.SetPayloadFormat(*pp.PayloadFormat)
	}
	if pp.MessageExpiry != nil {
		p.SetMessageExpiry(*pp.MessageExpiry)
	}
	if pp.ContentType != "" {
		p.SetContentType(pp.ContentType)
	}
	if pp.ResponseTopic != "" {
		p.SetResponseTopic(pp.ResponseTopic)
	}
	if len(pp.CorrelationData) > 0 {
		p.SetCorrelationData(pp.CorrelationData)
	}
	if pp.SubscriptionIdentifier != nil {
		p.AddSubscriptionID(uint32(*pp.SubscriptionIdentifier))
	}
	if pp.SessionExpiryInterval != nil {
		p.SetSessionExpiry(*pp.SessionExpiryInterval)
	}
	if pp.AssignedClientID != "" {
		p.SetAssignedClientID(pp.AssignedClientID)
	}
	if pp.ServerKeepAlive != nil {
		p.SetServerKeepAlive(*pp.ServerKeepAlive)
	}
	if pp.AuthMethod != "" {
		p.SetAuthMethod(pp.AuthMethod)
	}
	if len(pp.AuthData) > 0 {
		p.SetAuthData(pp.AuthData)
	}
	if pp.RequestProblemInfo != nil {
		p.SetRequestProblemInfo(*pp.RequestProblemInfo)
	}
	if pp.WillDelayInterval != nil {
		p.SetWillDelay(*pp.WillDelayInterval)
	}
	if pp.RequestResponseInfo != nil {
		p.SetRequestResponseInfo(*pp.RequestResponseInfo)
	}
	if pp.ResponseInfo != "" {
		p.SetResponseInfo(pp.ResponseInfo)
	}
	if pp.ServerReference != "" {
		p.SetServerReference(pp.ServerReference)
	}
	if pp.ReasonString != "" {
		p.SetReasonString(pp.ReasonString)
	}
	if pp.ReceiveMaximum != nil {
		p.SetReceiveMaximum(*pp.ReceiveMaximum)
	}
	if pp.TopicAliasMaximum != nil {
		p.SetTopicAliasMaximum(*pp.TopicAliasMaximum)
	}
	if pp.TopicAlias != nil {
		p.SetTopicAlias(*pp.TopicAlias)
	}
	if pp.MaximumQOS != nil {
		p.SetMaximumQoS(*pp.MaximumQOS)
	}
	if pp.RetainAvailable != nil {
		p.SetRetainAvailable(*pp.RetainAvailable)
	}
	if pp.MaximumPacketSize != nil {
		p.SetMaximumPacketSize(*pp.MaximumPacketSize)
	}
	if pp.WildcardSubAvailable != nil {
		p.SetWildcardSubAvailable(*pp.WildcardSubAvailable)
	}
	if pp.SubIDAvailable != nil {
		p.SetSubIDAvailable(*pp.SubIDAvailable)
	}
	if pp.SharedSubAvailable != nil {
		p.SetSharedSubAvailable(*pp.SharedSubAvailable)
	}
	for _, u := range pp.User {
		p.AddUser(u.Key, u.Value)
	}
	return p
}

func codesToBytes(cs []ReasonCode) []byte {
	out := make([]byte, len(cs))
	for i, c := range cs {
		out[i] = byte(c)
	}
	return out
}

func bytesToCodes(bs []byte) []ReasonCode {
	out := make([]ReasonCode, len(bs))
	for i, c := range bs {
		out[i] = ReasonCode(c)
	}
	return out
}

type pahoWriter interface {
	WriteTo(io.Writer) (int64, error)
}

func toPaho5(p Packet) pahoWriter {
	switch p := p.(type) {
	case *Connect:
		c := &pv5.Connect{ProtocolName: "MQTT", ProtocolVersion: 5, CleanStart: p.CleanStart,
			KeepAlive: p.KeepAlive, ClientID: p.ClientID, Properties: toPahoProps(&p.Properties),
			UsernameFlag: p.HasUsername, Username: p.Username, PasswordFlag: p.HasPassword, Password: p.Password}
		if w := p.Will; w != nil {
			c.WillFlag, c.WillQOS, c.WillRetain = true, byte(w.QoS), w.Retain
			c.WillTopic, c.WillMessage, c.WillProperties = w.Topic, w.Payload, toPahoProps(&w.Properties)
		}
		return c
	case *Connack:
		return &pv5.Connack{SessionPresent: p.SessionPresent, ReasonCode: byte(p.ReasonCode), Properties: toPahoProps(&p.Properties)}
	case *Publish:
		return &pv5.Publish{Topic: p.Topic, PacketID: p.PacketID, QoS: byte(p.QoS), Duplicate: p.Dup, Retain: p.Retain,
			Properties: toPahoProps(&p.Properties), Payload: p.Payload}
	case *Puback:
		return &pv5.Puback{PacketID: p.PacketID, ReasonCode: byte(p.ReasonCode), Properties: toPahoProps(&p.Properties)}
	case *Pubrec:
		return &pv5.Pubrec{PacketID: p.PacketID, ReasonCode: byte(p.ReasonCode), Properties: toPahoProps(&p.Properties)}
	case *Pubrel:
		return &pv5.Pubrel{PacketID: p.PacketID, ReasonCode: byte(p.ReasonCode), Properties: toPahoProps(&p.Properties)}
	case *Pubcomp:
		return &pv5.Pubcomp{PacketID: p.PacketID, ReasonCode: byte(p.ReasonCode), Properties: toPahoProps(&p.Properties)}
	case *Subscribe:
		s := &pv5.Subscribe{PacketID: p.PacketID, Properties: toPahoProps(&p.Properties)}
		for _, sub := range p.Subscriptions {
			s.Subscriptions = append(s.Subscriptions, pv5.SubOptions{Topic: sub.Filter, QoS: byte(sub.QoS),
				RetainHandling: byte(sub.RetainHandling), NoLocal: sub.NoLocal, RetainAsPublished: sub.RetainAsPublished})
		}
		return s
	case *Suback:
		return &pv5.Suback{PacketID: p.PacketID, Properties: toPahoProps(&p.Properties), Reasons: codesToBytes(p.ReasonCodes)}
	case *Unsubscribe:
		return &pv5.Unsubscribe{PacketID: p.PacketID, Properties: toPahoProps(&p.Properties), Topics: p.Filters}
	case *Unsuback:
		return &pv5.Unsuback{PacketID: p.PacketID, Properties: toPahoProps(&p.Properties), Reasons: codesToBytes(p.ReasonCodes)}
	case *Pingreq:
		return &pv5.Pingreq{}
	case *Pingresp:
		return &pv5.Pingresp{}
	case *Disconnect:
		return &pv5.Disconnect{ReasonCode: byte(p.ReasonCode), Properties: toPahoProps(&p.Properties)}
	case *Auth:
		return &pv5.Auth{ReasonCode: byte(p.ReasonCode), Properties: toPahoProps(&p.Properties)}
	}
	panic(fmt.Sprintf("unknown packet %T", p))
}

func fromPaho5(c pv5.Packet) (Packet, error) {
	switch c := c.(type) {
	case *pv5.Connect:
		p := &Connect{Version: Version(c.ProtocolVersion), CleanStart: c.CleanStart, KeepAlive: c.KeepAlive,
			ClientID: c.ClientID, Properties: fromPahoProps(c.Properties), HasUsername: c.UsernameFlag,
			Username: c.Username, HasPassword: c.PasswordFlag, Password: c.Password}
		if c.WillFlag {
			p.Will = &Will{Topic: c.WillTopic, Payload: c.WillMessage, QoS: QoS(c.WillQOS), Retain: c.WillRetain,
				Properties: fromPahoProps(c.WillProperties)}
		}
		return p, nil
	case *pv5.Connack:
		return &Connack{SessionPresent: c.SessionPresent, ReasonCode: ReasonCode(c.ReasonCode), Properties: fromPahoProps(c.Properties)}, nil
	case *pv5.Publish:
		return &Publish{Topic: c.Topic, PacketID: c.PacketID, QoS: QoS(c.QoS), Dup: c.Duplicate, Retain: c.Retain,
			Properties: fromPahoProps(c.Properties), Payload: c.Payload}, nil
	case *pv5.Puback:
		return &Puback{PacketID: c.PacketID, ReasonCode: ReasonCode(c.ReasonCode), Properties: fromPahoProps(c.Properties)}, nil
	case *pv5.Pubrec:
		return &Pubrec{PacketID: c.PacketID, ReasonCode: ReasonCode(c.ReasonCode), Properties: fromPahoProps(c.Properties)}, nil
	case *pv5.Pubrel:
		return &Pubrel{PacketID: c.PacketID, ReasonCode: ReasonCode(c.ReasonCode), Properties: fromPahoProps(c.Properties)}, nil
	case *pv5.Pubcomp:
		return &Pubcomp{PacketID: c.PacketID, ReasonCode: ReasonCode(c.ReasonCode), Properties: fromPahoProps(c.Properties)}, nil
	case *pv5.Subscribe:
		p := &Subscribe{PacketID: c.PacketID, Properties: fromPahoProps(c.Properties)}
		for _, o := range c.Subscriptions {
			p.Subscriptions = append(p.Subscriptions, Subscription{Filter: o.Topic, QoS: QoS(o.QoS),
				NoLocal: o.NoLocal, RetainAsPublished: o.RetainAsPublished, RetainHandling: RetainHandling(o.RetainHandling)})
		}
		return p, nil
	case *pv5.Suback:
		return &Suback{PacketID: c.PacketID, Properties: fromPahoProps(c.Properties), ReasonCodes: bytesToCodes(c.Reasons)}, nil
	case *pv5.Unsubscribe:
		return &Unsubscribe{PacketID: c.PacketID, Properties: fromPahoProps(c.Properties), Filters: c.Topics}, nil
	case *pv5.Unsuback:
		return &Unsuback{PacketID: c.PacketID, Properties: fromPahoProps(c.Properties), ReasonCodes: bytesToCodes(c.Reasons)}, nil
	case *pv5.Pingreq:
		return &Pingreq{}, nil
	case *pv5.Pingresp:
		return &Pingresp{}, nil
	case *pv5.Disconnect:
		return &Disconnect{ReasonCode: ReasonCode(c.ReasonCode), Properties: fromPahoProps(c.Properties)}, nil
	case *pv5.Auth:
		return &Auth{ReasonCode: ReasonCode(c.ReasonCode), Properties: fromPahoProps(c.Properties)}, nil
	}
	return nil, fmt.Errorf("unknown paho packet %T", c)
}

func toPaho3(p Packet) pv3.ControlPacket {
	switch p := p.(type) {
	case *Connect:
		c := pv3.NewControlPacket(pv3.Connect).(*pv3.ConnectPacket)
		c.ProtocolName, c.ProtocolVersion, c.CleanSession, c.Keepalive = "MQTT", 4, p.CleanStart, p.KeepAlive
		c.ClientIdentifier = p.ClientID
		c.UsernameFlag, c.Username, c.PasswordFlag, c.Password = p.HasUsername, p.Username, p.HasPassword, p.Password
		if w := p.Will; w != nil {
			c.WillFlag, c.WillQos, c.WillRetain, c.WillTopic, c.WillMessage = true, byte(w.QoS), w.Retain, w.Topic, w.Payload
		}
		return c
	case *Connack:
		c := pv3.NewControlPacket(pv3.Connack).(*pv3.ConnackPacket)
		c.SessionPresent = p.SessionPresent
		c.ReturnCode, _ = ConnackReturnCode311(p.ReasonCode)
		return c
	case *Publish:
		c := pv3.NewControlPacket(pv3.Publish).(*pv3.PublishPacket)
		c.Qos, c.Dup, c.Retain = byte(p.QoS), p.Dup, p.Retain
		c.TopicName, c.MessageID, c.Payload = p.Topic, p.PacketID, p.Payload
		return c
	case *Puback:
		c := pv3.NewControlPacket(pv3.Puback).(*pv3.PubackPacket)
		c.MessageID = p.PacketID
		return c
	case *Pubrec:
		c := pv3.NewControlPacket(pv3.Pubrec).(*pv3.PubrecPacket)
		c.MessageID = p.PacketID
		return c
	case *Pubrel:
		c := pv3.NewControlPacket(pv3.Pubrel).(*pv3.PubrelPacket)
		c.MessageID = p.PacketID
		return c
	case *Pubcomp:
		c := pv3.NewControlPacket(pv3.Pubcomp).(*pv3.PubcompPacket)
		c.MessageID = p.PacketID
		return c
	case *Subscribe:
		c := pv3.NewControlPacket(pv3.Subscribe).(*pv3.SubscribePacket)
		c.MessageID = p.PacketID
		for _, s := range p.Subscriptions {
			c.Topics = append(c.Topics, s.Filter)
			c.Qoss = append(c.Qoss, byte(s.QoS))
		}
		return c
	case *Suback:
		c := pv3.NewControlPacket(pv3.Suback).(*pv3.SubackPacket)
		c.MessageID, c.ReturnCodes = p.PacketID, codesToBytes(p.ReasonCodes)
		return c
	case *Unsubscribe:
		c := pv3.NewControlPacket(pv3.Unsubscribe).(*pv3.UnsubscribePacket)
		c.MessageID, c.Topics = p.PacketID, p.Filters
		return c
	case *Unsuback:
		c := pv3.NewControlPacket(pv3.Unsuback).(*pv3.UnsubackPacket)
		c.MessageID = p.PacketID
		return c
	case *Pingreq:
		return pv3.NewControlPacket(pv3.Pingreq)
	case *Pingresp:
		return pv3.NewControlPacket(pv3.Pingresp)
	case *Disconnect:
		return pv3.NewControlPacket(pv3.Disconnect)
	}
	panic(fmt.Sprintf("no 3.1.1 form of %T", p))
}

func fromPaho3(c pv3.ControlPacket) (Packet, error) {
	switch c := c.(type) {
	case *pv3.ConnectPacket:
		p := &Connect{Version: Version(c.ProtocolVersion), CleanStart: c.CleanSession, KeepAlive: c.Keepalive,
			ClientID: c.ClientIdentifier, HasUsername: c.UsernameFlag, Username: c.Username,
			HasPassword: c.PasswordFlag, Password: c.Password}
		if c.WillFlag {
			p.Will = &Will{Topic: c.WillTopic, Payload: c.WillMessage, QoS: QoS(c.WillQos), Retain: c.WillRetain}
		}
		return p, nil
	case *pv3.ConnackPacket:
		if int(c.ReturnCode) >= len(connackV311) {
			return nil, fmt.Errorf("return code %d", c.ReturnCode)
		}
		return &Connack{SessionPresent: c.SessionPresent, ReasonCode: connackV311[c.ReturnCode]}, nil
	case *pv3.PublishPacket:
		return &Publish{Topic: c.TopicName, PacketID: c.MessageID, QoS: QoS(c.Qos), Dup: c.Dup, Retain: c.Retain, Payload: c.Payload}, nil
	case *pv3.PubackPacket:
		return &Puback{PacketID: c.MessageID}, nil
	case *pv3.PubrecPacket:
		return &Pubrec{PacketID: c.MessageID}, nil
	case *pv3.PubrelPacket:
		return &Pubrel{PacketID: c.MessageID}, nil
	case *pv3.PubcompPacket:
		return &Pubcomp{PacketID: c.MessageID}, nil
	case *pv3.SubscribePacket:
		p := &Subscribe{PacketID: c.MessageID}
		for i, f := range c.Topics {
			p.Subscriptions = append(p.Subscriptions, Subscription{Filter: f, QoS: QoS(c.Qoss[i])})
		}
		return p, nil
	case *pv3.SubackPacket:
		return &Suback{PacketID: c.MessageID, ReasonCodes: bytesToCodes(c.ReturnCodes)}, nil
	case *pv3.UnsubscribePacket:
		return &Unsubscribe{PacketID: c.MessageID, Filters: c.Topics}, nil
	case *pv3.UnsubackPacket:
		return &Unsuback{PacketID: c.MessageID}, nil
	case *pv3.PingreqPacket:
		return &Pingreq{}, nil
	case *pv3.PingrespPacket:
		return &Pingresp{}, nil
	case *pv3.DisconnectPacket:
		return &Disconnect{}, nil
	}
	return nil, fmt.Errorf("unknown paho packet %T", c)
}
