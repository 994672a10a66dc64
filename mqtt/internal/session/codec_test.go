package session_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/internal/logpos"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/table"
	"pgregory.net/rapid"
)

func drawCursor(t *rapid.T, label string) table.Cursor {
	return table.Cursor{
		Key:  engine.LogKey(rapid.Uint64().Draw(t, label+".key")),
		Next: rapid.Uint32().Draw(t, label+".next"),
	}
}

// drawVec draws a position in a log of k partitions.
func drawVec(t *rapid.T, label string, k int) logpos.Vec {
	v := logpos.Start(k)
	for i := range k {
		v.Set(i, drawCursor(t, label))
	}
	return v
}

// drawPos draws a message's position in a log of k partitions.
func drawPos(t *rapid.T, label string, k int) logpos.Pos {
	return logpos.At(rapid.IntRange(0, k-1).Draw(t, label+".part"), drawCursor(t, label))
}

func drawSession(t *rapid.T) session.Record {
	k := rapid.SampledFrom([]int{1, 1, 2, 3, logpos.Max}).Draw(t, "partitions")
	s := session.Record{
		Version:        packet.Version(rapid.SampledFrom([]byte{3, 4, 5}).Draw(t, "version")),
		Expiry:         rapid.Uint32().Draw(t, "expiry"),
		Online:         rapid.Bool().Draw(t, "online"),
		Claimed:        rapid.Bool().Draw(t, "claimed"),
		Rowless:        rapid.Bool().Draw(t, "rowless"),
		Node:           rapid.String().Draw(t, "node"),
		Conn:           rapid.String().Draw(t, "conn"),
		DisconnectedAt: rapid.Int64().Draw(t, "disc"),
		Checkpoint:     drawVec(t, "cp", k),
		SentHigh:       drawVec(t, "sent", k),
		NextPI:         rapid.Uint16().Draw(t, "pi"),
	}
	for i := range rapid.IntRange(0, 4).Draw(t, "subs") {
		_ = i
		r := session.Sub{
			Filter: rapid.String().Draw(t, "filter"),
			Group:  rapid.String().Draw(t, "group"),
			QoS:    rapid.ByteRange(0, 2).Draw(t, "qos"),
			NL:     rapid.Bool().Draw(t, "nl"),
			RAP:    rapid.Bool().Draw(t, "rap"),
			RH:     rapid.ByteRange(0, 2).Draw(t, "rh"),
			ID:     rapid.Uint32().Draw(t, "id"),
			Pos:    rapid.Bool().Draw(t, "pos"),
		}
		if rapid.Bool().Draw(t, "since") {
			c := drawVec(t, "since", k)
			r.Since = &c
		}
		s.Subs = append(s.Subs, r)
	}
	if rapid.Bool().Draw(t, "will") {
		s.Will = &session.Will{Msg: rapid.SliceOf(rapid.Byte()).Draw(t, "willmsg"), Delay: rapid.Uint32().Draw(t, "delay")}
		if len(s.Will.Msg) == 0 {
			s.Will.Msg = nil
		}
	}
	for range rapid.IntRange(0, 5).Draw(t, "q1") {
		s.Q1 = append(s.Q1, session.Q1Slot{Pos: drawPos(t, "q1pos", k), PI: rapid.Uint16().Draw(t, "q1pi")})
	}
	return s
}

// normal makes an empty will message compare equal to the decoded one.
func normal(s session.Record) session.Record {
	if s.Will != nil && len(s.Will.Msg) == 0 {
		w := *s.Will
		w.Msg = nil
		s.Will = &w
	}
	return s
}

// TestSessionCodecRoundTrip checks that every record decodes to itself.
func TestSessionCodecRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := drawSession(t)
		b := session.Encode(&s)
		var got session.Record
		if err := session.Decode(b, &got); err != nil {
			t.Fatalf("decode: %v", err)
		}
		if !reflect.DeepEqual(normal(got), normal(s)) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, s)
		}
		// A truncated record is refused, never read short.
		if n := rapid.IntRange(0, len(b)-1).Draw(t, "cut"); true {
			var short session.Record
			if err := session.Decode(b[:n], &short); !errors.Is(err, engine.ErrCorrupt) {
				t.Fatalf("record cut at %d of %d: %v", n, len(b), err)
			}
		}
	})
}

// TestSessionCodecReadsJSON checks that a record stored as JSON, the form
// of earlier versions, reads as the same record, and that trailing bytes
// and unknown formats are refused.
func TestSessionCodecReadsJSON(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := drawSession(t)
		// JSON keeps strings as valid UTF-8 only.
		s.Node, s.Conn = "node-1", "conn-7"
		for i := range s.Subs {
			s.Subs[i].Filter, s.Subs[i].Group = "a/+/b", ""
		}
		v, err := json.Marshal(&s)
		if err != nil {
			t.Fatal(err)
		}
		var got session.Record
		if err := session.Decode(v, &got); err != nil {
			t.Fatalf("decode JSON: %v", err)
		}
		if !bytes.Equal(session.Encode(&got), session.Encode(&s)) {
			t.Fatalf("JSON record read as\n%+v\nwant %+v", got, s)
		}
	})
	s := session.Record{Version: packet.V5, Node: "n"}
	b := append(session.Encode(&s), 0)
	if err := session.Decode(b, &s); !errors.Is(err, engine.ErrCorrupt) {
		t.Errorf("trailing byte: %v", err)
	}
	if err := session.Decode([]byte{0x07, 0, 5}, &s); !errors.Is(err, engine.ErrCorrupt) {
		t.Errorf("unknown format: %v", err)
	}
}

// FuzzSessionCodec checks that no input panics the decoder, and that a
// record it accepts encodes back to the same bytes.
func FuzzSessionCodec(f *testing.F) {
	since := logpos.One(table.Cursor{Key: 9, Next: 2})
	split := logpos.Start(3)
	split.Set(2, table.Cursor{Key: 7, Next: 1})
	f.Add(session.Encode(&session.Record{Version: packet.V5, Checkpoint: split, SentHigh: split,
		Subs: []session.Sub{{Filter: "x/#", QoS: 1, Since: &split}},
		Q1:   []session.Q1Slot{{Pos: logpos.At(2, table.Cursor{Key: 7}), PI: 4}}}))
	f.Add(session.Encode(&session.Record{Version: packet.V311, Expiry: session.NeverExpires}))
	f.Add(session.Encode(&session.Record{Version: packet.V5, Online: true, Node: "a", Conn: "c1",
		Subs:       []session.Sub{{Filter: "x/#", QoS: 2, Since: &since}, {Filter: "y", Group: "g", ID: 7}},
		Will:       &session.Will{Msg: []byte("will"), Delay: 5},
		Q1:         []session.Q1Slot{{Pos: logpos.At(0, since.Of(0)), PI: 4}},
		Checkpoint: logpos.One(table.Cursor{Key: 8}), NextPI: 5}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var s session.Record
		if len(b) > 0 && b[0] == '{' {
			return // JSON: encoding/json's own business
		}
		if session.Decode(b, &s) != nil {
			return
		}
		if got := session.Encode(&s); !bytes.Equal(got, b) {
			// Varints have one canonical form on output only; compare
			// the decoded records instead.
			var again session.Record
			if err := session.Decode(got, &again); err != nil || !reflect.DeepEqual(normal(again), normal(s)) {
				t.Fatalf("re-encoded record differs: %v\n%+v\n%+v", err, again, s)
			}
		}
	})
}

// TestOutRecordCodec checks that an outbound QoS 2 record decodes to
// itself from its binary form and from the JSON form of earlier versions,
// and that a truncated record is refused.
func TestOutRecordCodec(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := session.OutRecord{PI: rapid.Uint16().Draw(t, "pi"), State: rapid.Byte().Draw(t, "state"),
			Pos: drawPos(t, "pos", logpos.Max), Msg: rapid.SliceOf(rapid.Byte()).Draw(t, "msg")}
		if r.Pos.C.Next == 0 || rapid.Bool().Draw(t, "coarse") {
			r.Pos.C.Next = 0 // JSON's text form has no composite cursor with Next 0
		}
		js, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		for name, v := range map[string][]byte{"binary": r.Encode(), "JSON": js} {
			var got session.OutRecord
			if err := got.Decode(v); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got.PI != r.PI || got.State != r.State || got.Pos != r.Pos || !bytes.Equal(got.Msg, r.Msg) {
				t.Fatalf("%s: got %+v, want %+v", name, got, r)
			}
		}
		b := r.Encode()
		if split := append(session.AppendOutHeader(nil, r.PI, r.State, r.Pos), r.Msg...); !bytes.Equal(split, b) {
			t.Fatalf("AppendOutHeader and the message: % x, Encode: % x", split, b)
		}
		cut := rapid.IntRange(0, 4).Draw(t, "cut")
		var short session.OutRecord
		if err := short.Decode(b[:min(cut, len(b))]); err == nil && cut < len(b)-len(r.Msg) {
			t.Fatalf("record cut at %d decoded: %+v", cut, short)
		}
	})
}

// stored is a session with every part of the record set: an offline 5.0
// session with a plain subscription held back by its since position, a
// shared one with every option, a delayed will and two QoS 1 deliveries
// in flight.
func stored() session.Record {
	since := logpos.One(table.Cursor{Key: 4660, Next: 3})
	return session.Record{Version: packet.V5, Expiry: 3600, Node: "node-a", Conn: "c-17", DisconnectedAt: 1767225600000,
		Subs: []session.Sub{{Filter: "sensors/+/temp", QoS: 1, Since: &since},
			{Filter: "jobs/#", Group: "workers", QoS: 2, NL: true, RAP: true, RH: 2, ID: 7, Pos: true}},
		Checkpoint: logpos.One(table.Cursor{Key: 4660, Next: 1}), SentHigh: logpos.One(table.Cursor{Key: 4700}),
		Will: &session.Will{Msg: []byte("will: node-a gone"), Delay: 30}, NextPI: 12,
		Q1: []session.Q1Slot{{Pos: logpos.At(0, table.Cursor{Key: 4661, Next: 2}), PI: 10}, {Pos: logpos.At(0, table.Cursor{Key: 4700}), PI: 11}}}
}

// The stored forms as the broker has written them since the binary form
// came in, and the JSON form of the versions before it. A data directory
// written by any of them must still open: these bytes never change.
const (
	storedBinary = "b10405901c80a0d5edee66066e6f64652d6104632d3137b42401dc24000c020e73656e736f72732f2b2f74656d7000" +
		"01040000b42403066a6f62732f2307776f726b657273020b02071177696c6c3a206e6f64652d6120676f6e651e02b524020adc24000b"
	storedJSON = `{"v":5,"expiry":3600,"node":"node-a","conn":"c-17","disc":1767225600000,` +
		`"subs":[{"f":"sensors/+/temp","q":1,"s":"4660.3"},{"f":"jobs/#","g":"workers","q":2,"nl":true,"rap":true,"rh":2,"id":7,"pos":true}],` +
		`"cp":"4660.1","sent":"4700","will":{"msg":"d2lsbDogbm9kZS1hIGdvbmU=","delay":30},"pi":12,` +
		`"q1":[{"pos":"4661.2","pi":10},{"pos":"4700","pi":11}]}`
	storedOutBinary = "b2810402b524026d7367"
	storedOutJSON   = `{"pi":513,"state":2,"pos":"4661.2","msg":"bXNn"}`
)

// TestStoredFormUnchanged checks that a session record encodes to the
// bytes earlier versions wrote, and that those bytes and the JSON form
// before them both decode to the same record, which then encodes the
// same again; likewise for an outbound QoS 2 record.
func TestStoredFormUnchanged(t *testing.T) {
	want := stored()
	if got := hex.EncodeToString(session.Encode(&want)); got != storedBinary {
		t.Fatalf("stored form changed:\n got %s\nwant %s", got, storedBinary)
	}
	bin, _ := hex.DecodeString(storedBinary)
	for name, v := range map[string][]byte{"binary": bin, "JSON": []byte(storedJSON)} {
		var got session.Record
		if err := session.Decode(v, &got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s read as\n%+v\nwant %+v", name, got, want)
		}
		if again := session.Encode(&got); !bytes.Equal(again, bin) {
			t.Fatalf("%s re-encoded as %x", name, again)
		}
	}

	out := session.OutRecord{PI: 513, State: 2, Pos: logpos.At(0, table.Cursor{Key: 4661, Next: 2}), Msg: []byte("msg")}
	if got := hex.EncodeToString(out.Encode()); got != storedOutBinary {
		t.Fatalf("outbound stored form changed:\n got %s\nwant %s", got, storedOutBinary)
	}
	outBin, _ := hex.DecodeString(storedOutBinary)
	for name, v := range map[string][]byte{"binary": outBin, "JSON": []byte(storedOutJSON)} {
		var got session.OutRecord
		if err := got.Decode(v); err != nil {
			t.Fatalf("outbound %s: %v", name, err)
		}
		if !reflect.DeepEqual(got, out) {
			t.Fatalf("outbound %s read as %+v, want %+v", name, got, out)
		}
	}
}
