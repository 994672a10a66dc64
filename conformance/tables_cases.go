package conformance

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/table"
)

// The tables suite: MQTT topics under a configured prefix mapped onto the
// records of the table layer (docs/tables.md).
func init() {
	register("tables",
		Case{Name: "T01_retained_publish_writes_record", Run: caseTableRetainedPublishWrites},
		Case{Name: "T02_empty_payload_deletes_record", Run: caseTableEmptyPayloadDeletes},
		Case{Name: "T03_app_write_reaches_mqtt_subscriber", Run: caseTableAppWriteReachesSubscriber},
		Case{Name: "T04_current_records_then_changes_no_duplicate", Run: caseTableSnapshotThenChanges},
		Case{Name: "T05_bad_table_topics_refused", Run: caseTableBadTopicsRefused},
		Case{Name: "T06_acl_on_table_topics", Run: caseTableACL},
		Case{Name: "T07_persistent_session_gets_current_records_after_restart", Run: caseTablePersistentAfterRestart},
	)
}

// tablesOn is the broker configuration of the tables cases.
var tablesOn = mqtt.Options{TablesPrefix: "tables/"}

// tableDelivery is one PUBLISH a table subscriber took.
type tableDelivery struct {
	Topic, Payload, ContentType string
	Retain                      bool
}

// tableSubscriber is a raw client that acknowledges each QoS 1 PUBLISH
// as it reads it and records what it took.
type tableSubscriber struct {
	*rawClient
	t    T
	name string
	took []tableDelivery
}

func newTableSubscriber(t T, addr, id string, v packet.Version) *tableSubscriber {
	t.Helper()
	c, _ := connectRaw(t, id, addr, id, v, true)
	return &tableSubscriber{rawClient: c, t: t, name: id}
}

// subscribe subscribes to filter at QoS 1 and returns the SUBACK;
// PUBLISHes that come first are taken.
func (c *tableSubscriber) subscribe(pi uint16, filter string) *packet.Suback {
	c.t.Helper()
	c.Send(&packet.Subscribe{PacketID: pi, Subscriptions: []packet.Subscription{{Filter: filter, QoS: packet.QoS1}}})
	for {
		p := c.Read("SUBACK")
		if pub, ok := p.(*packet.Publish); ok {
			c.take(pub)
			continue
		}
		ack, ok := p.(*packet.Suback)
		if !ok || ack.PacketID != pi {
			c.t.Fatalf("%s: got %s, want SUBACK %d", c.name, mqtttest.Describe(p), pi)
		}
		return ack
	}
}

func (c *tableSubscriber) take(p *packet.Publish) {
	c.took = append(c.took, tableDelivery{Topic: p.Topic, Payload: string(p.Payload), ContentType: p.Properties.ContentType, Retain: p.Retain})
	if p.QoS == packet.QoS1 {
		c.Send(&packet.Puback{PacketID: p.PacketID})
	}
}

// takeUntil takes PUBLISHes until done reports true for the last one.
func (c *tableSubscriber) takeUntil(what string, done func(tableDelivery) bool) {
	c.t.Helper()
	for len(c.took) == 0 || !done(c.took[len(c.took)-1]) {
		p := c.Read(what)
		pub, ok := p.(*packet.Publish)
		if !ok {
			c.t.Fatalf("%s: got %s, want PUBLISH (%s)", c.name, mqtttest.Describe(p), what)
		}
		c.take(pub)
	}
}

// publishAck sends p (QoS 1) and returns its PUBACK.
func publishAck(c *rawClient, p *packet.Publish) *packet.Puback {
	c.Send(p)
	return c.Expect(packet.TypePuback, p.PacketID).(*packet.Puback)
}

func retainedQoS1(pi uint16, topic, payload string) *packet.Publish {
	p := pubQoS1(pi, topic, payload)
	p.Retain = true
	return p
}

// recordValue returns the value of tbl/id, or false when it is absent.
func recordValue(t T, db *table.DB, tbl, id string) (string, bool) {
	t.Helper()
	r, err := db.Get(t.Context(), tbl, id)
	if errors.Is(err, table.ErrNotFound) {
		return "", false
	}
	if err != nil {
		t.Fatalf("get %s/%s: %v", tbl, id, err)
	}
	return string(r.Value), true
}

// caseTableRetainedPublishWrites (T01): a retained PUBLISH under the
// prefix writes the record, readable through package table, and nothing
// to the message log; QoS 0 and 3.1.1 too; one not retained changes no
// record.
func caseTableRetainedPublishWrites(t T, tg Target) {
	s := startBroker(t, tg, tablesOn)
	pub, _ := connectRaw(t, "t01-pub", s.Addr, "t01-pub", packet.V5, true)
	p := retainedQoS1(1, "tables/devices/d1", `{"t":21.5}`)
	p.Properties.SetContentType("application/json")
	if ack := publishAck(pub, p); ack.ReasonCode.IsError() {
		t.Fatalf("retained PUBLISH refused: %v (%q)", ack.ReasonCode, ack.Properties.ReasonString)
	}
	if v, ok := recordValue(t, s.DB(), "devices", "d1"); !ok || v != `{"t":21.5}` {
		t.Fatalf("record devices/d1 = %q, %v after the PUBACK; want the payload", v, ok)
	}
	// An id with levels keeps them.
	if ack := publishAck(pub, retainedQoS1(2, "tables/devices/site/a/d2", "x")); ack.ReasonCode.IsError() {
		t.Fatalf("retained PUBLISH refused: %v", ack.ReasonCode)
	}
	if v, ok := recordValue(t, s.DB(), "devices", "site/a/d2"); !ok || v != "x" {
		t.Fatalf("record devices/site/a/d2 = %q, %v; want x", v, ok)
	}
	// Not retained: a message under the id, no record.
	if ack := publishAck(pub, pubQoS1(3, "tables/devices/d3", "event")); ack.ReasonCode.IsError() {
		t.Fatalf("PUBLISH refused: %v", ack.ReasonCode)
	}
	if v, ok := recordValue(t, s.DB(), "devices", "d3"); ok {
		t.Fatalf("a PUBLISH that is not retained wrote record devices/d3 = %q", v)
	}
	// 3.1.1, QoS 0, retained.
	old, _ := connectRaw(t, "t01-old", s.Addr, "t01-old", packet.V311, true)
	old.Send(&packet.Publish{Topic: "tables/devices/d4", Payload: []byte("q0"), Retain: true})
	eventually(t, "record devices/d4 from a QoS 0 retained PUBLISH", func() bool {
		v, ok := recordValue(t, s.DB(), "devices", "d4")
		return ok && v == "q0"
	})
	for _, topic := range []string{"tables/devices/d1", "tables/devices/d3", "tables/devices/d4"} {
		if got := logMessages(t, s.DB(), topic); len(got) != 0 {
			t.Fatalf("message log holds %s for %s; the namespace writes only the table", abbrev(got), topic)
		}
	}
	if st := s.Broker().Stats(); st.TableWrites != 4 {
		t.Fatalf("TableWrites = %d, want 4", st.TableWrites)
	}
}

// caseTableEmptyPayloadDeletes (T02): a retained PUBLISH with an empty
// payload deletes the record; a subscriber sees the deletion as an empty
// PUBLISH.
func caseTableEmptyPayloadDeletes(t T, tg Target) {
	s := startBroker(t, tg, tablesOn)
	pub, _ := connectRaw(t, "t02-pub", s.Addr, "t02-pub", packet.V5, true)
	publishAck(pub, retainedQoS1(1, "tables/cfg/mode", "auto"))
	if _, ok := recordValue(t, s.DB(), "cfg", "mode"); !ok {
		t.Fatalf("record cfg/mode absent after its retained PUBLISH")
	}
	sub := newTableSubscriber(t, s.Addr, "t02-sub", packet.V5)
	wantGranted(t, sub.subscribe(1, "tables/cfg/+"))
	sub.takeUntil("the current record", func(d tableDelivery) bool { return d.Topic == "tables/cfg/mode" })
	if ack := publishAck(pub, retainedQoS1(2, "tables/cfg/mode", "")); ack.ReasonCode.IsError() {
		t.Fatalf("empty retained PUBLISH refused: %v", ack.ReasonCode)
	}
	if v, ok := recordValue(t, s.DB(), "cfg", "mode"); ok {
		t.Fatalf("record cfg/mode = %q after an empty retained PUBLISH; want deleted", v)
	}
	sub.takeUntil("the deletion", func(d tableDelivery) bool { return d.Payload == "" })
	want := []tableDelivery{{Topic: "tables/cfg/mode", Payload: "auto", Retain: true}, {Topic: "tables/cfg/mode"}}
	if fmt.Sprint(sub.took) != fmt.Sprint(want) {
		t.Fatalf("subscriber took %v, want %v", sub.took, want)
	}
	// A new subscriber gets no record for it.
	late := newTableSubscriber(t, s.Addr, "t02-late", packet.V311)
	wantGranted(t, late.subscribe(1, "tables/cfg/#"))
	late.Silence(quiet)
}

// caseTableAppWriteReachesSubscriber (T03): what an application writes
// through package table, in the broker's DB, reaches an MQTT subscriber
// as a PUBLISH; the content type of an MQTT write comes with it, and not
// with a later application write of the same record.
func caseTableAppWriteReachesSubscriber(t T, tg Target) {
	s := startBroker(t, tg, tablesOn)
	ctx := t.Context()
	sub := newTableSubscriber(t, s.Addr, "t03-sub", packet.V5)
	wantGranted(t, sub.subscribe(1, "tables/settings/#"))
	sub.Silence(quiet) // an empty table: no current records
	if err := s.DB().Update(ctx, func(tx *table.Tx) error { return tx.Put("settings", "interval", []byte("10s")) }); err != nil {
		t.Fatalf("app write: %v", err)
	}
	sub.takeUntil("the app's write", func(tableDelivery) bool { return true })
	if got, want := sub.took[0], (tableDelivery{Topic: "tables/settings/interval", Payload: "10s"}); got != want {
		t.Fatalf("took %+v, want %+v", got, want)
	}
	pub, _ := connectRaw(t, "t03-pub", s.Addr, "t03-pub", packet.V5, true)
	p := retainedQoS1(1, "tables/settings/unit", "°C")
	p.Properties.SetContentType("text/plain")
	publishAck(pub, p)
	sub.takeUntil("the MQTT write", func(d tableDelivery) bool { return d.Topic == "tables/settings/unit" })
	if got := sub.took[len(sub.took)-1]; got.ContentType != "text/plain" || got.Payload != "°C" {
		t.Fatalf("MQTT write delivered as %+v, want payload °C with content type text/plain", got)
	}
	if err := s.DB().Update(ctx, func(tx *table.Tx) error { return tx.Put("settings", "unit", []byte("K")) }); err != nil {
		t.Fatalf("app write: %v", err)
	}
	if err := s.DB().Update(ctx, func(tx *table.Tx) error { return tx.Delete("settings", "interval") }); err != nil {
		t.Fatalf("app delete: %v", err)
	}
	sub.takeUntil("the app's delete", func(d tableDelivery) bool { return d.Topic == "tables/settings/interval" })
	want := []tableDelivery{
		{Topic: "tables/settings/interval", Payload: "10s"},
		{Topic: "tables/settings/unit", Payload: "°C", ContentType: "text/plain"},
		{Topic: "tables/settings/unit", Payload: "K"},
		{Topic: "tables/settings/interval"},
	}
	if fmt.Sprint(sub.took) != fmt.Sprint(want) {
		t.Fatalf("subscriber took %+v, want %+v", sub.took, want)
	}
	// A subscriber arriving now gets the current records, with the
	// content type only where the current version came from MQTT.
	p = retainedQoS1(2, "tables/settings/lang", "en")
	p.Properties.SetContentType("text/plain")
	publishAck(pub, p)
	late := newTableSubscriber(t, s.Addr, "t03-late", packet.V5)
	wantGranted(t, late.subscribe(1, "tables/settings/#"))
	late.takeUntil("two current records", func(tableDelivery) bool { return len(late.took) == 2 })
	want = []tableDelivery{
		{Topic: "tables/settings/lang", Payload: "en", ContentType: "text/plain", Retain: true},
		{Topic: "tables/settings/unit", Payload: "K", Retain: true},
	}
	if fmt.Sprint(late.took) != fmt.Sprint(want) {
		t.Fatalf("late subscriber took %+v, want %+v", late.took, want)
	}
	late.Silence(quiet)
	if st := s.Broker().Stats(); st.TableDeliveries < 6 {
		t.Fatalf("TableDeliveries = %d, want at least 6", st.TableDeliveries)
	}
}

// caseTableSnapshotThenChanges (T04): a subscription made while an
// application writes gets the current records (retained) first, then the
// changes: for every record each write after the one it first received
// comes once, in order, up to the last, and none twice.
func caseTableSnapshotThenChanges(t T, tg Target) {
	s := startBroker(t, tg, tablesOn)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	const ids, rounds = 10, 20
	write := func(id, n int) error {
		return s.DB().Update(ctx, func(tx *table.Tx) error {
			return tx.Put("meters", fmt.Sprintf("m%02d", id), []byte(strconv.Itoa(n)))
		})
	}
	for id := range ids {
		if err := write(id, 0); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	var wg sync.WaitGroup
	var werr error
	started := make(chan struct{})
	var once sync.Once
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer once.Do(func() { close(started) })
		for n := 1; n <= rounds; n++ {
			for id := range ids {
				if err := write(id, n); err != nil {
					werr = err
					return
				}
			}
			if n == 3 {
				once.Do(func() { close(started) })
			}
		}
		werr = s.DB().Update(ctx, func(tx *table.Tx) error { return tx.Put("meters", "zz-done", []byte("end")) })
	}()
	<-started
	sub := newTableSubscriber(t, s.Addr, "t04-sub", packet.V5)
	wantGranted(t, sub.subscribe(1, "tables/meters/#"))
	sub.takeUntil("the last write", func(d tableDelivery) bool { return d.Topic == "tables/meters/zz-done" })
	wg.Wait()
	if werr != nil {
		t.Fatalf("writer: %v", werr)
	}
	sub.Silence(quiet)
	last := map[string]int{}
	live := false
	for i, d := range sub.took {
		if !d.Retain {
			live = true
		} else if live {
			t.Fatalf("delivery %d (%+v) is a current record after a change", i, d)
		}
		if d.Topic == "tables/meters/zz-done" {
			continue
		}
		n, err := strconv.Atoi(d.Payload)
		if err != nil {
			t.Fatalf("delivery %d: payload %q", i, d.Payload)
		}
		prev, seen := last[d.Topic]
		switch {
		case !seen && !d.Retain:
			t.Fatalf("delivery %d: %s=%d is a change for a record the current records lacked", i, d.Topic, n)
		case seen && n != prev+1:
			t.Fatalf("delivery %d: %s went from %d to %d: a gap or a duplicate", i, d.Topic, prev, n)
		}
		last[d.Topic] = n
	}
	if len(last) != ids {
		t.Fatalf("took %d records, want %d", len(last), ids)
	}
	for topic, n := range last {
		if n != rounds {
			t.Fatalf("%s ended at %d, want %d", topic, n, rounds)
		}
	}
}

// caseTableBadTopicsRefused (T05): topics and filters under the prefix
// that name no usable table or record are refused with a reason, and
// write nothing.
func caseTableBadTopicsRefused(t T, tg Target) {
	s := startBroker(t, tg, tablesOn)
	c, _ := connectRaw(t, "t05", s.Addr, "t05", packet.V5, true)
	for i, tc := range []struct{ topic, why string }{
		{"tables/mqtt.sessions/nobody", "broker's own"},
		{"tables/devices", "<table>/<id>"},
		{"tables//d1", "table level is empty"},
		{"tables/" + strings.Repeat("x", table.MaxTableName+1) + "/d1", "limit is"},
	} {
		ack := publishAck(c, retainedQoS1(uint16(i+1), tc.topic, "x"))
		if ack.ReasonCode != packet.TopicNameInvalid || !strings.Contains(ack.Properties.ReasonString, tc.why) {
			t.Fatalf("PUBLISH %q: PUBACK %v (%q), want 0x90 saying %q", tc.topic, ack.ReasonCode, ack.Properties.ReasonString, tc.why)
		}
	}
	if _, ok := recordValue(t, s.DB(), "mqtt.sessions", "nobody"); ok {
		t.Fatalf("a PUBLISH reached the broker's session table")
	}
	for i, tc := range []struct {
		filter string
		rc     packet.ReasonCode
		why    string
	}{
		{"tables/#", packet.TopicFilterInvalid, "names one table"},
		{"tables/+/d1", packet.TopicFilterInvalid, "names one table"},
		{"tables/devices", packet.TopicFilterInvalid, "<table>/#"},
		{"$share/g/tables/devices/#", packet.SharedSubscriptionsNotSupported, "cannot be shared"},
		{"$replay/-1m/tables/devices/#", packet.ImplementationSpecificError, "current records"},
	} {
		c.Send(&packet.Subscribe{PacketID: uint16(10 + i), Subscriptions: []packet.Subscription{{Filter: tc.filter, QoS: packet.QoS1}}})
		ack, ok := c.Expect(packet.TypeSuback, uint16(10+i)).(*packet.Suback)
		if !ok || ack.ReasonCodes[0] != tc.rc || !strings.Contains(ack.Properties.ReasonString, tc.why) {
			t.Fatalf("SUBSCRIBE %q: SUBACK %v (%q), want %v saying %q", tc.filter, ack.ReasonCodes, ack.Properties.ReasonString, tc.rc, tc.why)
		}
	}
	// 3.1.1 cannot be told: the PUBLISH is acknowledged and dropped, the
	// subscription refused with 0x80.
	old, _ := connectRaw(t, "t05-old", s.Addr, "t05-old", packet.V311, true)
	if ack := publishAck(old, retainedQoS1(1, "tables/mqtt.retained/x", "x")); ack.ReasonCode != 0 {
		t.Fatalf("3.1.1 PUBACK %v", ack.ReasonCode)
	}
	if _, ok := recordValue(t, s.DB(), "mqtt.retained", "x"); ok {
		t.Fatalf("a 3.1.1 PUBLISH reached the broker's retained table")
	}
	old.Send(&packet.Subscribe{PacketID: 2, Subscriptions: []packet.Subscription{{Filter: "tables/#", QoS: packet.QoS1}}})
	if ack := old.Expect(packet.TypeSuback, 2).(*packet.Suback); ack.ReasonCodes[0] != 0x80 {
		t.Fatalf("3.1.1 SUBACK %v, want 0x80", ack.ReasonCodes)
	}
	// In process: the same checks, as errors.
	err := s.Broker().Publish(t.Context(), mqtt.Message{Topic: "tables/mqtt.sessions/x", Payload: []byte("x"), QoS: 1, Retain: true})
	if !errors.Is(err, mqtt.ErrTableTopic) {
		t.Fatalf("in-process publish to a reserved table: %v, want ErrTableTopic", err)
	}
	if st := s.Broker().Stats(); st.TableRefused < 9 || st.TableWrites != 0 {
		t.Fatalf("TableRefused = %d, TableWrites = %d; want at least 9 refused, none written", st.TableRefused, st.TableWrites)
	}
}

// prefixAuthorizer grants every access to topics and filters under its
// prefixes and nothing else: an application's Authorizer.
type prefixAuthorizer []string

func (a prefixAuthorizer) Allow(_ context.Context, _ mqtt.Identity, _ mqtt.Access, name string) bool {
	for _, p := range a {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// caseTableACL (T06): the Authorizer decides per table topic as for any
// topic: a write it refuses writes no record, a subscription it refuses
// gets nothing, and a record of a table the client may read reaches it.
func caseTableACL(t T, tg Target) {
	opts := tablesOn
	opts.Authorizer = prefixAuthorizer{"tables/public/"}
	s := startBroker(t, tg, opts)
	c, _ := connectRaw(t, "t06", s.Addr, "t06", packet.V5, true)
	if ack := publishAck(c, retainedQoS1(1, "tables/private/k", "secret")); ack.ReasonCode != packet.NotAuthorized {
		t.Fatalf("PUBLISH to tables/private/k: PUBACK %v, want not authorized", ack.ReasonCode)
	}
	if _, ok := recordValue(t, s.DB(), "private", "k"); ok {
		t.Fatalf("a refused PUBLISH wrote record private/k")
	}
	if ack := publishAck(c, retainedQoS1(2, "tables/public/k", "open")); ack.ReasonCode.IsError() {
		t.Fatalf("PUBLISH to tables/public/k: PUBACK %v", ack.ReasonCode)
	}
	sub := newTableSubscriber(t, s.Addr, "t06-sub", packet.V5)
	if ack := sub.subscribe(1, "tables/private/#"); ack.ReasonCodes[0] != packet.NotAuthorized {
		t.Fatalf("SUBSCRIBE tables/private/#: %v, want not authorized", ack.ReasonCodes)
	}
	if err := s.DB().Update(t.Context(), func(tx *table.Tx) error { return tx.Put("private", "k", []byte("app")) }); err != nil {
		t.Fatalf("app write: %v", err)
	}
	wantGranted(t, sub.subscribe(2, "tables/public/#"))
	sub.takeUntil("the public record", func(tableDelivery) bool { return true })
	sub.Silence(quiet)
	if want := (tableDelivery{Topic: "tables/public/k", Payload: "open", Retain: true}); len(sub.took) != 1 || sub.took[0] != want {
		t.Fatalf("subscriber took %+v, want only %+v", sub.took, want)
	}
}

// caseTablePersistentAfterRestart (T07): a persistent session keeps its
// table subscription across a broker restart; when it reconnects it gets
// the current records (what changed while it was away, as the state it
// left), then the changes, without subscribing again.
func caseTablePersistentAfterRestart(t T, tg Target) {
	s := startBroker(t, tg, tablesOn)
	put := func(id, v string) {
		t.Helper()
		if err := s.DB().Update(t.Context(), func(tx *table.Tx) error { return tx.Put("doors", id, []byte(v)) }); err != nil {
			t.Fatalf("app write: %v", err)
		}
	}
	put("front", "closed")
	put("back", "closed")
	c, _ := connectRaw(t, "t07", s.Addr, "t07", packet.V5, false)
	sub := &tableSubscriber{rawClient: c, t: t, name: "t07"}
	wantGranted(t, sub.subscribe(1, "tables/doors/+"))
	sub.takeUntil("two current records", func(tableDelivery) bool { return len(sub.took) == 2 })
	sub.Disconnect()
	put("front", "open")
	if err := s.DB().Update(t.Context(), func(tx *table.Tx) error { return tx.Delete("doors", "back") }); err != nil {
		t.Fatalf("app delete: %v", err)
	}
	put("side", "open")
	if err := s.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	c2 := dialRaw(t, "t07", s.Addr, packet.V5)
	if ack := c2.Connect(mqtttest.ConnectPacket("t07", packet.V5, false)); !ack.SessionPresent {
		t.Fatalf("CONNACK without the session")
	}
	sub2 := &tableSubscriber{rawClient: c2, t: t, name: "t07"}
	sub2.takeUntil("two current records", func(tableDelivery) bool { return len(sub2.took) == 2 })
	want := []tableDelivery{
		{Topic: "tables/doors/front", Payload: "open", Retain: true},
		{Topic: "tables/doors/side", Payload: "open", Retain: true},
	}
	if fmt.Sprint(sub2.took) != fmt.Sprint(want) {
		t.Fatalf("after the restart took %+v, want %+v", sub2.took, want)
	}
	put("side", "closed")
	sub2.takeUntil("the change", func(tableDelivery) bool { return len(sub2.took) == 3 })
	if got, want := sub2.took[2], (tableDelivery{Topic: "tables/doors/side", Payload: "closed"}); got != want {
		t.Fatalf("took %+v, want %+v", got, want)
	}
	sub2.Silence(quiet)
}
