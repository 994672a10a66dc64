package conformance

import (
	"errors"
	"fmt"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/table"
)

// The qos2 suite: the QoS 2 receive pipeline cases Q01..Q21 of the semantics
// note (docs/semantics.md, section 4), driven through real TCP connections
// against a real broker on each engine (harness in mqtt_harness.go, client
// in rawclient.go). The broker releases a QoS 2 message in one atomic commit
// (message log append plus removal of the staged copy, conditional on the
// staged version), so the note's "discard" is that commit, its "release
// watermark" is the staged slot being gone, and "broadcast" is subscribers
// reading the log after the commit. Repetition counts are scaled down where
// the note asks for thousands (each case says where) so the suite stays well
// under a minute per engine.
func init() {
	register("qos2",
		Case{Name: "Q01_burst_ordering_exactly_once", Run: caseBurstOrderingExactlyOnce},
		Case{Name: "Q02_duplicate_publish_different_bytes", Run: caseDuplicatePublishDifferentBytes},
		Case{Name: "Q03_retransmitted_pubrel_while_release_held", Run: caseRetransmittedPubrelWhileReleaseHeld},
		Case{Name: "Q04_pi_reuse_with_release_delayed", Run: casePIReuseWithReleaseDelayed},
		Case{Name: "Q05_dup_publish_across_reconnect", Run: caseDupPublishAcrossReconnect},
		Case{Name: "Q06_crash_between_pubrec_and_pubrel", Run: caseCrashBetweenPubrecAndPubrel},
		Case{Name: "Q07_crash_between_pubrel_and_pubcomp", Run: caseCrashBetweenPubrelAndPubcomp},
		Case{Name: "Q08_retried_pubrel_on_another_node", Run: caseRetriedPubrelOnAnotherNode},
		Case{Name: "Q09_close_with_unreleased_exchanges", Run: caseCloseWithUnreleasedExchanges},
		Case{Name: "Q10_corrupt_staged_slot", Run: caseCorruptStagedSlot},
		Case{Name: "Q11_unknown_pubrel", Run: caseUnknownPubrel},
		Case{Name: "Q12_window_full_with_stalled_store", Run: caseWindowFullWithStalledStore},
		Case{Name: "Q13_copy_cap_exceeded", Run: caseCopyCapExceeded},
		Case{Name: "Q14_mixed_qos_on_one_connection", Run: caseMixedQoSOnOneConnection},
		Case{Name: "Q15_store_error_mid_burst", Run: caseStoreErrorMidBurst},
		Case{Name: "Q16_session_takeover_with_exchanges_in_flight", Run: caseSessionTakeoverWithExchangesInFlight},
		Case{Name: "Q17_clean_start_discards_inbound_state", Run: caseCleanStartDiscardsInboundState},
		Case{Name: "Q18_outbound_crash_after_subscriber_pubrec", Run: caseOutboundCrashAfterSubscriberPubrec},
		Case{Name: "Q19_outbound_resend_before_pubrec", Run: caseOutboundResendBeforePubrec},
		Case{Name: "Q20_property_random_qos2_sequences", Run: casePropertyRandomQoS2Sequences},
		Case{Name: "Q21_property_qos1_pipeline", Run: casePropertyQoS1Pipeline},
	)
}

func burstQoS2(topic, prefix string, from, to int) []packet.Packet {
	var out []packet.Packet
	for i := from; i <= to; i++ {
		out = append(out, pubQoS2(uint16(i), topic, fmt.Sprintf("%s%d", prefix, i)))
	}
	return out
}

func pubrels(from, to int) []packet.Packet {
	var out []packet.Packet
	for i := from; i <= to; i++ {
		out = append(out, pubrel(uint16(i)))
	}
	return out
}

func acks(typ packet.Type, from, to int) []ack {
	var out []ack
	for i := from; i <= to; i++ {
		out = append(out, ack{Type: typ, PacketID: uint16(i)})
	}
	return out
}

// exchange runs one full QoS 2 exchange and checks the responses.
func exchange(c *rawClient, pi uint16, topic, payload string) {
	c.Send(pubQoS2(pi, topic, payload))
	c.ExpectSeq(ack{Type: packet.TypePubrec, PacketID: pi})
	c.Send(pubrel(pi))
	c.ExpectSeq(ack{Type: packet.TypePubcomp, PacketID: pi})
}

// caseBurstOrderingExactlyOnce (Q01): 100 QoS 2 PUBLISHes without reading;
// PUBRECs and PUBCOMPs come back in packet order and the subscriber gets
// each message once.
func caseBurstOrderingExactlyOnce(t T, tg Target) {
	s := startBroker(t, tg, mqtt.Options{})
	sub := newSubscriber(t, "sub", s.Addr, "q01-sub", packet.V311, "q01/foo", packet.QoS1)
	pub, _ := connectRaw(t, "pub", s.Addr, "q01-pub", packet.V5, true)
	pub.Send(burstQoS2("q01/foo", "msg-", 1, 100)...)
	pub.ExpectSeq(acks(packet.TypePubrec, 1, 100)...)
	pub.Send(pubrels(1, 100)...)
	pub.ExpectSeq(acks(packet.TypePubcomp, 1, 100)...)
	sub.expectExactly(seqPayloads("msg-", 1, 100)...)
	pub.Silence(quiet)
}

// caseDuplicatePublishDifferentBytes (Q02): three PUBLISHes on one id with
// other bytes (the second with DUP) before any PUBREC is read: three
// PUBRECs, three PUBCOMPs, the first bytes delivered once; the id is then
// reusable.
func caseDuplicatePublishDifferentBytes(t T, tg Target) {
	s := startBroker(t, tg, mqtt.Options{})
	sub := newSubscriber(t, "sub", s.Addr, "q02-sub", packet.V5, "q02/foo", packet.QoS2)
	pub, _ := connectRaw(t, "pub", s.Addr, "q02-pub", packet.V5, true)
	pub.Send(pubQoS2(444, "q02/foo", "data1"), dupOf(pubQoS2(444, "q02/foo", "data2")), pubQoS2(444, "q02/foo", "data3"))
	pub.ExpectSeq(ack{Type: packet.TypePubrec, PacketID: 444}, ack{Type: packet.TypePubrec, PacketID: 444}, ack{Type: packet.TypePubrec, PacketID: 444})
	pub.Send(pubrel(444), pubrel(444), pubrel(444))
	pub.ExpectSeq(ack{Type: packet.TypePubcomp, PacketID: 444}, ack{Type: packet.TypePubcomp, PacketID: 444}, ack{Type: packet.TypePubcomp, PacketID: 444})
	exchange(pub, 444, "q02/foo", "data5")
	sub.expectExactly("data1", "data5")
	pub.Silence(quiet)
}

// caseRetransmittedPubrelWhileReleaseHeld (Q03): PUBREL retransmitted twice
// while the release is in flight. In the first round the pipeline sees the
// release commit stalled (an Ack hold): the retransmits are read and
// screened by the connection's released mark, and no PUBCOMP may overtake
// the held one. In the second the release commit itself is held before
// submission.
func caseRetransmittedPubrelWhileReleaseHeld(t T, tg Target) {
	f := newBrokerFaults()
	s := startBroker(t, tg, mqtt.Options{Hooks: f.hooks()})
	sub := newSubscriber(t, "sub", s.Addr, "q03-sub", packet.V311, "q03/foo", packet.QoS2)
	pub, _ := connectRaw(t, "pub", s.Addr, "q03-pub", packet.V311, false)

	pub.Send(pubQoS2(7, "q03/foo", "m7"))
	pub.ExpectSeq(ack{Type: packet.TypePubrec, PacketID: 7})
	release := f.holdAcks(mqtt.KindRelease)
	pub.Send(pubrel(7))
	pub.Send(pubrel(7))
	pub.Send(pubrel(7))
	pub.Silence(quiet) // the held release heads the FIFO
	release()
	pub.ExpectSeq(ack{Type: packet.TypePubcomp, PacketID: 7}, ack{Type: packet.TypePubcomp, PacketID: 7}, ack{Type: packet.TypePubcomp, PacketID: 7})

	pub.Send(pubQoS2(8, "q03/foo", "m8"))
	pub.ExpectSeq(ack{Type: packet.TypePubrec, PacketID: 8})
	release = f.holdSubmits(mqtt.KindRelease)
	pub.Send(pubrel(8))
	f.waitHeld(t, mqtt.KindRelease)
	pub.Send(pubrel(8), pubrel(8))
	pub.Silence(quiet)
	release()
	pub.ExpectSeq(ack{Type: packet.TypePubcomp, PacketID: 8}, ack{Type: packet.TypePubcomp, PacketID: 8}, ack{Type: packet.TypePubcomp, PacketID: 8})
	sub.expectExactly("m7", "m8")
}

// casePIReuseWithReleaseDelayed (Q04): ten back-to-back exchanges on one
// packet id with the release delayed 20 ms in the pipeline: each publication
// is new, none is refused as a duplicate, each is delivered once, in order.
func casePIReuseWithReleaseDelayed(t T, tg Target) {
	f := newBrokerFaults()
	f.delayAcks(mqtt.KindRelease, func() time.Duration { return 20 * time.Millisecond })
	s := startBroker(t, tg, mqtt.Options{Hooks: f.hooks()})
	sub := newSubscriber(t, "sub", s.Addr, "q04-sub", packet.V5, "q04/foo", packet.QoS1)
	pub, _ := connectRaw(t, "pub", s.Addr, "q04-pub", packet.V5, true)
	for i := 1; i <= 10; i++ {
		pub.Send(pubQoS2(1, "q04/foo", fmt.Sprintf("cycle-%d", i)))
		rec := pub.Expect(packet.TypePubrec, 1)
		if rc := mqtttest.ReasonOf(rec); rc != packet.Success {
			t.Fatalf("cycle %d: PUBREC reason %v, want success", i, rc)
		}
		pub.Send(pubrel(1))
		if rc := mqtttest.ReasonOf(pub.Expect(packet.TypePubcomp, 1)); rc != packet.Success {
			t.Fatalf("cycle %d: PUBCOMP reason %v, want success", i, rc)
		}
	}
	sub.expectExactly(seqPayloads("cycle-", 1, 10)...)
}

// caseDupPublishAcrossReconnect (Q05): a DUP PUBLISH with other bytes on a
// resumed session is deduped by the staged slot: the first bytes are
// delivered, once.
func caseDupPublishAcrossReconnect(t T, tg Target) {
	s := startBroker(t, tg, mqtt.Options{})
	sub := newSubscriber(t, "sub", s.Addr, "q05-sub", packet.V5, "q05/foo", packet.QoS2)
	pub, _ := connectRaw(t, "pub", s.Addr, "q05-pub", packet.V311, false)
	pub.Send(pubQoS2(444, "q05/foo", "data1"))
	pub.ExpectSeq(ack{Type: packet.TypePubrec, PacketID: 444})
	pub.Drop()
	pub, ackp := connectRaw(t, "pub", s.Addr, "q05-pub", packet.V311, false)
	if !ackp.SessionPresent {
		t.Fatalf("session not present after reconnect")
	}
	pub.Send(dupOf(pubQoS2(444, "q05/foo", "data2")))
	pub.ExpectSeq(ack{Type: packet.TypePubrec, PacketID: 444})
	pub.Send(pubrel(444))
	pub.ExpectSeq(ack{Type: packet.TypePubcomp, PacketID: 444})
	sub.expectExactly("data1")
}

// sessionOnline reads the broker's session record of client; ok is false
// when there is none.
func sessionOnline(t T, db *table.DB, client string) (online, ok bool) {
	t.Helper()
	si, ok, err := mqtt.SessionOf(t.Context(), db, client)
	if errors.Is(err, engine.ErrCorrupt) {
		t.Fatalf("session record of %s: %v", client, err)
	}
	return si.Online, ok && err == nil
}

// caseCloseWithUnreleasedExchanges (Q09): 50 exchanges staged, 25 released,
// then an abrupt close. The released ones are delivered once, the others
// not; the connection's pipeline ends and the session is stored offline
// within 2 s (the broker's counterpart of "no pending reply registrations");
// a successor connection completes an exchange and sees no stray
// acknowledgement.
func caseCloseWithUnreleasedExchanges(t T, tg Target) {
	s := startBroker(t, tg, mqtt.Options{})
	sub := newSubscriber(t, "sub", s.Addr, "q09-sub", packet.V311, "q09/foo", packet.QoS1)
	pub, _ := connectRaw(t, "pub", s.Addr, "q09-pub", packet.V5, false)
	pub.Send(burstQoS2("q09/foo", "msg-", 1, 50)...)
	pub.ExpectSeq(acks(packet.TypePubrec, 1, 50)...)
	pub.Send(pubrels(1, 25)...)
	pub.ExpectSeq(acks(packet.TypePubcomp, 1, 25)...)
	pub.Drop()
	deadline := time.Now().Add(2 * time.Second)
	for {
		online, ok := sessionOnline(t, s.DB(), "q09-pub")
		if ok && !online {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("2 s after the close the session is still online (record present: %v)", ok)
		}
		time.Sleep(10 * time.Millisecond)
	}
	sub.expectExactly(seqPayloads("msg-", 1, 25)...)
	pub, ackp := connectRaw(t, "pub", s.Addr, "q09-pub", packet.V5, false)
	if !ackp.SessionPresent {
		t.Fatalf("session not present for the successor")
	}
	exchange(pub, 100, "q09/foo", "after")
	pub.Silence(quiet)
	sub.expectExactly(append(seqPayloads("msg-", 1, 25), "after")...)
}

// caseCorruptStagedSlot (Q10): a staged slot that does not decode fails the
// PUBREL's connection without a PUBCOMP and is discarded; nothing is
// delivered and the retried PUBREL on the next connection gets a clean
// PUBCOMP.
func caseCorruptStagedSlot(t T, tg Target) {
	s := startBroker(t, tg, mqtt.Options{})
	sub := newSubscriber(t, "sub", s.Addr, "q10-sub", packet.V311, "q10/#", packet.QoS2)
	pub, _ := connectRaw(t, "pub", s.Addr, "q10-pub", packet.V5, false)
	tx := s.DB().Begin()
	tx.Put(brokerStaged, stagedSlot("q10-pub", 5), []byte("\xffgarbage, not a stored message"))
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatalf("write garbage: %v", err)
	}
	pub.Send(pubrel(5))
	if !pub.Closed(waitFor) {
		t.Fatalf("the connection survived a PUBREL of a corrupt staged message")
	}
	for _, p := range pub.Drain() {
		if p.Type() != packet.TypeDisconnect {
			t.Fatalf("got %s on the failing connection, want nothing or DISCONNECT", mqtttest.Describe(p))
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for !stagedAbsent(t, s.DB(), "q10-pub", 5) {
		if time.Now().After(deadline) {
			t.Fatalf("the corrupt staged slot is still there after 2 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	pub, _ = connectRaw(t, "pub", s.Addr, "q10-pub", packet.V5, false)
	pub.Send(pubrel(5))
	comp := pub.Expect(packet.TypePubcomp, 5)
	if rc := mqtttest.ReasonOf(comp); rc != packet.Success && rc != packet.PacketIdentifierNotFound {
		t.Fatalf("retried PUBREL: PUBCOMP reason %v", rc)
	}
	pub.Send(&packet.Pingreq{})
	pub.Expect(packet.TypePingresp, 0)
	exchange(pub, 5, "q10/foo", "clean")
	sub.expectExactly("clean")
}

// caseUnknownPubrel (Q11): a PUBREL for an id the broker never saw gets a
// PUBCOMP (5.0: 0x92) and the connection stays usable.
func caseUnknownPubrel(t T, tg Target) {
	s := startBroker(t, tg, mqtt.Options{})
	sub := newSubscriber(t, "sub", s.Addr, "q11-sub", packet.V311, "q11/foo", packet.QoS1)
	for _, v := range []packet.Version{packet.V5, packet.V311} {
		id := fmt.Sprintf("q11-pub-%d", v)
		pub, _ := connectRaw(t, "pub", s.Addr, id, v, true)
		pub.Send(pubrel(321))
		comp := pub.Expect(packet.TypePubcomp, 321)
		if rc := mqtttest.ReasonOf(comp); rc != packet.Success && rc != packet.PacketIdentifierNotFound {
			t.Fatalf("%v: PUBCOMP reason %v, want 0 or 0x92", v, rc)
		}
		pub.Send(&packet.Pingreq{})
		pub.Expect(packet.TypePingresp, 0)
		exchange(pub, 321, "q11/foo", fmt.Sprintf("after-%d", v))
		pub.Disconnect()
	}
	sub.expectExactly("after-5", "after-4")
}

// caseMixedQoSOnOneConnection (Q14): QoS 1 and QoS 2 interleaved on one
// connection, sent without reading: one FIFO across types.
func caseMixedQoSOnOneConnection(t T, tg Target) {
	s := startBroker(t, tg, mqtt.Options{})
	sub := newSubscriber(t, "sub", s.Addr, "q14-sub", packet.V5, "q14/#", packet.QoS2)
	pub, _ := connectRaw(t, "pub", s.Addr, "q14-pub", packet.V5, true)
	pub.Send(pubQoS1(1, "q14/a", "A1"), pubQoS2(2, "q14/b", "B1"), pubQoS1(3, "q14/a", "A2"), pubrel(2),
		pubQoS2(4, "q14/b", "B2"), pubQoS1(5, "q14/a", "A3"), pubrel(4))
	pub.ExpectSeq(ack{Type: packet.TypePuback, PacketID: 1}, ack{Type: packet.TypePubrec, PacketID: 2}, ack{Type: packet.TypePuback, PacketID: 3}, ack{Type: packet.TypePubcomp, PacketID: 2},
		ack{Type: packet.TypePubrec, PacketID: 4}, ack{Type: packet.TypePuback, PacketID: 5}, ack{Type: packet.TypePubcomp, PacketID: 4})
	sub.expectExactly("A1", "A2", "B1", "A3", "B2")
	pub.Silence(quiet)
}

// caseCleanStartDiscardsInboundState (Q17): a clean start discards the
// staged inbound QoS 2 state: the old id's PUBREL gets a PUBCOMP and
// delivers nothing.
func caseCleanStartDiscardsInboundState(t T, tg Target) {
	s := startBroker(t, tg, mqtt.Options{})
	sub := newSubscriber(t, "sub", s.Addr, "q17-sub", packet.V311, "q17/foo", packet.QoS2)
	pub, _ := connectRaw(t, "pub", s.Addr, "q17-pub", packet.V5, false)
	pub.Send(pubQoS2(3, "q17/foo", "staged"))
	pub.ExpectSeq(ack{Type: packet.TypePubrec, PacketID: 3})
	if stagedAbsent(t, s.DB(), "q17-pub", 3) {
		t.Fatalf("the PUBREC came before the message was staged")
	}
	pub.Drop()
	pub, ackp := connectRaw(t, "pub", s.Addr, "q17-pub", packet.V5, true)
	if ackp.SessionPresent {
		t.Fatalf("clean start reported a session present")
	}
	if !stagedAbsent(t, s.DB(), "q17-pub", 3) {
		t.Fatalf("clean start kept the staged message")
	}
	pub.Send(pubrel(3))
	if rc := mqtttest.ReasonOf(pub.Expect(packet.TypePubcomp, 3)); rc != packet.PacketIdentifierNotFound && rc != packet.Success {
		t.Fatalf("PUBCOMP reason %v", rc)
	}
	sub.waitN(0)
	time.Sleep(quiet)
	if got := sub.deliveries(); len(got) != 0 {
		t.Fatalf("a discarded staged message was delivered: %v", got)
	}
}
