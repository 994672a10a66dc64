package mqtt_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
	"github.com/tidemark-io/tidemark/table"
)

// partitionedClients returns one client id per partition of n, in
// partition order, each starting with prefix.
func partitionedClients(t *testing.T, prefix string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := 0; slices.Contains(ids, ""); i++ {
		id := fmt.Sprintf("%s%d", prefix, i)
		if p := table.PartitionOf(id, n); ids[p] == "" {
			ids[p] = id
		}
		if i > 1000 {
			t.Fatal("no client id for some partition")
		}
	}
	return ids
}

// TestPartitionedBrokerDelivers: on a store split over three
// partitions, publishers whose sessions are in different partitions
// write their messages to their own partition's log, and a subscriber
// receives every one exactly once, each publisher's in order and none
// marked DUP, live (QoS 0 too) and after resuming its session, across a
// restart of the broker too. On JetStream the partitions' log keys are
// stream sequences, which overlap: a position taken for another
// partition's would drop or mark messages.
func TestPartitionedBrokerDelivers(t *testing.T) {
	for _, eng := range []string{testEngine, "jetstream"} {
		t.Run(eng, func(t *testing.T) { partitionedBrokerDelivers(t, eng) })
	}
}

func partitionedBrokerDelivers(t *testing.T, eng string) {
	const parts = 3
	s := mqtttest.StartPartitioned(t, eng, parts, mqtt.Options{})
	pubs := partitionedClients(t, "pub-", parts)
	// The first partition's log runs ahead of the others'.
	first := connect5(t, s.Addr, pubs[0], true, 0)
	for i := range 30 {
		first.pub("ahead", 1, false, fmt.Sprint(i))
	}
	first.close()
	live := connect5(t, s.Addr, "live-sub", true, 0)
	live.sub("p/#", 2)
	live0 := connect5(t, s.Addr, "live-sub-qos0", true, 0)
	live0.sub("p/#", 0)
	away := connect5(t, s.Addr, "away-sub", true, 3600)
	away.sub("p/#", 1)
	away.close()

	const each = 20
	send := func(round string) {
		for _, id := range pubs {
			c := connect5(t, s.Addr, id, true, 0)
			for i := range each {
				c.pub("p/"+id, byte(1+i%2), false, fmt.Sprintf("%s-%d", round, i))
			}
			c.close()
		}
	}
	check := func(who string, c *client5, round string, dupOK bool) {
		t.Helper()
		got := map[string][]string{}
		for _, m := range c.expect(parts * each) {
			got[m.Topic] = append(got[m.Topic], string(m.Payload))
			if m.Duplicate() && !dupOK {
				t.Fatalf("%s, %s: %s %q delivered once, marked DUP", who, round, m.Topic, m.Payload)
			}
		}
		for _, id := range pubs {
			var want []string
			for i := range each {
				want = append(want, fmt.Sprintf("%s-%d", round, i))
			}
			if !slices.Equal(got["p/"+id], want) {
				t.Fatalf("%s, %s: from %s got %v, want %v", who, round, id, got["p/"+id], want)
			}
		}
		c.expectNone(200 * time.Millisecond)
	}

	send("a")
	check("live", live, "a", false)
	check("live at QoS 0", live0, "a", false)
	// Each publisher's messages are in its own partition's log.
	for i := range parts {
		st, err := s.Parts().DB(i).LogStats(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if st.Entries < each {
			t.Fatalf("partition %d's log holds %d entries, want at least the %d of %s", i, st.Entries, each, pubs[i])
		}
	}
	away = connect5(t, s.Addr, "away-sub", false, 3600)
	check("resumed", away, "a", false)
	away.close()

	send("b")
	check("live", live, "b", false)
	live.close()
	live0.close()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	away = connect5(t, s.Addr, "away-sub", false, 3600)
	check("resumed after a restart", away, "b", false)
	away.close()
}

// TestPartitionedRetained: a topic's retained message may be written in
// several partitions (by publishers of each); a new subscription gets
// the newest, and a clear in any partition hides the copies in the
// others, for a plain filter and a wildcard alike.
func TestPartitionedRetained(t *testing.T) {
	const parts = 3
	s := mqtttest.StartPartitioned(t, testEngine, parts, mqtt.Options{})
	pubs := partitionedClients(t, "ret-", parts)
	retain := func(pub, topic, payload string) {
		c := connect5(t, s.Addr, pub, true, 0)
		c.pub(topic, 1, true, payload)
		c.close()
	}
	read := func(filter string, n int) map[string]string {
		t.Helper()
		c := connect5(t, s.Addr, "reader", true, 0)
		defer c.close()
		c.sub(filter, 1)
		got := map[string]string{}
		for _, m := range c.expect(n) {
			got[m.Topic] = string(m.Payload)
		}
		c.expectNone(200 * time.Millisecond)
		return got
	}
	retain(pubs[0], "r/a", "1")
	retain(pubs[1], "r/a", "2")
	retain(pubs[2], "r/b", "3")
	retain(pubs[0], "r/c", "4")
	retain(pubs[2], "r/c", "") // cleared from another partition
	if got := read("r/a", 1); got["r/a"] != "2" {
		t.Fatalf("r/a: %v, want the newest, 2", got)
	}
	if got, want := read("r/#", 2), map[string]string{"r/a": "2", "r/b": "3"}; !mapsEqual(got, want) {
		t.Fatalf("r/#: %v, want %v", got, want)
	}
	retain(pubs[1], "r/a", "5")
	retain(pubs[0], "r/a", "6")
	if got, want := read("r/+", 2), map[string]string{"r/a": "6", "r/b": "3"}; !mapsEqual(got, want) {
		t.Fatalf("r/+: %v, want %v", got, want)
	}
	c := connect5(t, s.Addr, "reader2", true, 0)
	c.sub("r/c", 1)
	c.expectNone(200 * time.Millisecond)
	c.close()
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestPartitionedRefusals: what needs a store of one partition is
// refused on a split one, by name, and a replay subscription gets a
// reason code saying why.
func TestPartitionedRefusals(t *testing.T) {
	for name, edit := range map[string]func(*mqtt.Options){
		"History":      func(o *mqtt.Options) { o.History = time.Hour },
		"TablesPrefix": func(o *mqtt.Options) { o.TablesPrefix = "tables/" },
	} {
		var o mqtt.Options
		edit(&o)
		srv := &mqtttest.Server{Engine: testEngine, Dir: t.TempDir(), Opts: o, Partitions: 2}
		err := srv.Start()
		if err == nil {
			_ = srv.Stop()
			t.Fatalf("%s on a split store: started", name)
		}
		if !strings.Contains(err.Error(), name) || !errors.Is(err, engine.ErrInvalidOption) {
			t.Fatalf("%s on a split store: %v", name, err)
		}
	}

	s := mqtttest.StartPartitioned(t, testEngine, 2, mqtt.Options{})
	c := connect5(t, s.Addr, "replayer", true, 0)
	sa, err := c.Subscribe(ctxT(t), &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: mqtt.ReplayPrefix + "-1h/x/#", QoS: 1}}})
	// paho reports a refused subscription as an error with the reason
	// string, beside the SUBACK.
	if err == nil || !strings.Contains(err.Error(), "split over partitions") || sa == nil || sa.Reasons[0] != 0x83 {
		t.Fatalf("replay on a split store: %v, %+v", err, sa)
	}
	if _, err := s.Broker().Subscribe(ctxT(t), "x/#", mqtt.SubscribeOptions{From: "-1h"}, func(mqtt.Delivery) error { return nil }); err == nil {
		t.Fatal("an in-process replay on a split store started")
	}
}

// TestPartitionedInProcess: the in-process API publishes into the log of
// a split store and subscribes to every partition's, with positions that
// name their partition.
func TestPartitionedInProcess(t *testing.T) {
	const parts = 3
	s := mqtttest.StartPartitioned(t, testEngine, parts, mqtt.Options{})
	got := make(chan mqtt.Delivery, 100)
	sub, err := s.Broker().Subscribe(ctxT(t), "ip/#", mqtt.SubscribeOptions{}, func(d mqtt.Delivery) error { got <- d; return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	pubs := partitionedClients(t, "ip-", parts)
	for _, id := range pubs {
		c := connect5(t, s.Addr, id, true, 0)
		c.pub("ip/"+id, 1, false, id)
		c.close()
	}
	if err := s.Broker().Publish(ctxT(t), mqtt.Message{Topic: "ip/app", QoS: 1, Payload: []byte("app")}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for range parts + 1 {
		select {
		case d := <-got:
			seen[string(d.Payload)] = d.Position
		case <-time.After(wait):
			t.Fatalf("in-process subscriber got %v", seen)
		}
	}
	for i, id := range pubs {
		pos, ok := seen[id]
		if !ok {
			t.Fatalf("no delivery of %s: %v", id, seen)
		}
		if named := strings.Contains(pos, "/"); named != (i > 0) {
			t.Fatalf("%s (partition %d) delivered at position %q", id, i, pos)
		}
	}
}

// TestPartitionedRetentionAndQueueLimit: on a split store, retention
// truncates each partition's log below what every session still needs
// of that partition, and the queue limit holds in each partition: an
// offline session keeps its newest messages of each publisher's
// partition, and the rest of each log goes.
func TestPartitionedRetentionAndQueueLimit(t *testing.T) {
	const parts, limit, each = 3, 5, 30
	s := mqtttest.StartPartitioned(t, testEngine, parts, mqtt.Options{MaxQueuedMessages: limit})
	pubs := partitionedClients(t, "q-", parts)
	away := connect5(t, s.Addr, "q-away", true, 3600)
	away.sub("q/#", 1)
	away.close()
	for _, id := range pubs {
		c := connect5(t, s.Addr, id, true, 0)
		for i := range each {
			c.pub("q/"+id, 1, false, fmt.Sprint(i))
		}
		c.close()
	}
	// Each partition's log is cut just below the limit's newest
	// messages: the publisher's session, gone with its connection, may
	// hold its log for a moment after the DISCONNECT.
	waitFor(t, "every partition's log cut to the queue limit", func() bool {
		retainOnce(t, s)
		for i := range parts {
			st, err := s.Parts().DB(i).LogStats(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			if st.Entries > limit {
				return false
			}
		}
		return true
	})
	away = connect5(t, s.Addr, "q-away", false, 3600)
	got := map[string][]string{}
	for _, m := range away.expect(parts * limit) {
		got[m.Topic] = append(got[m.Topic], string(m.Payload))
	}
	away.expectNone(200 * time.Millisecond)
	for _, id := range pubs {
		var want []string
		for i := each - limit; i < each; i++ {
			want = append(want, fmt.Sprint(i))
		}
		if !slices.Equal(got["q/"+id], want) {
			t.Fatalf("from %s: %v, want the newest %d, %v", id, got["q/"+id], limit, want)
		}
	}
	away.close()
}

// TestPartitionedRetainedPages: a wildcard subscription's retained
// messages are read in pages from each partition in turn, ids too long
// for the engine's key order included, and each topic is offered once,
// from the partition holding its newest copy, however the publishers of
// its copies are spread.
func TestPartitionedRetainedPages(t *testing.T) {
	const parts = 3
	s := mqtttest.StartPartitioned(t, testEngine, parts, mqtt.Options{})
	pubs := partitionedClients(t, "rpp-", parts)
	long := strings.Repeat("long", 200)
	want := map[string]string{}
	retain := func(from, topic, payload string) {
		t.Helper()
		if err := s.Broker().Publish(ctxT(t), mqtt.Message{Topic: topic, Payload: []byte(payload), QoS: 1, Retain: true, From: from}); err != nil {
			t.Fatal(err)
		}
		if payload == "" {
			delete(want, topic)
		} else {
			want[topic] = payload
		}
	}
	// More than a page in every partition, each topic first written in
	// one partition and then, for some, again or cleared in another.
	for i := range 400 {
		topic := fmt.Sprintf("rpp/%d", i)
		if i%4 == 0 {
			topic = fmt.Sprintf("rpp/%s%d", long, i)
		}
		first := pubs[i%parts]
		retain(first, topic, first)
		switch i % 5 {
		case 1:
			again := pubs[(i+1)%parts]
			retain(again, topic, again)
		case 2:
			retain(pubs[(i+2)%parts], topic, "")
		}
	}
	c := connect5(t, s.Addr, "rpp-sub", true, 0)
	c.sub("rpp/#", 1)
	got := map[string]string{}
	for _, m := range c.expect(len(want)) {
		if _, twice := got[m.Topic]; twice {
			t.Fatalf("retained %.40q offered twice", m.Topic)
		}
		got[m.Topic] = string(m.Payload)
	}
	c.expectNone(200 * time.Millisecond)
	if !mapsEqual(got, want) {
		for topic, p := range want {
			if got[topic] != p {
				t.Fatalf("retained %.40q: got %q, want the newest, %q", topic, got[topic], p)
			}
		}
		t.Fatalf("got %d retained messages, want %d", len(got), len(want))
	}
}

// TestPartitionOfSplitStoreRefused: a broker is not opened on one
// partition of a split store, where it would write every client's state
// to the one partition the brokers on the whole store look in for that
// client's only.
func TestPartitionOfSplitStoreRefused(t *testing.T) {
	s := mqtttest.StartPartitioned(t, testEngine, 3, mqtt.Options{})
	_, err := mqtt.New(s.Parts().DB(1), mqtt.Options{})
	if !errors.Is(err, engine.ErrInvalidOption) || !strings.Contains(err.Error(), "partition 1 of 3") || !strings.Contains(err.Error(), "NewPartitioned") {
		t.Fatalf("broker on partition 1 of 3: %v", err)
	}
	if i, n := s.Parts().DB(2).Partition(); i != 2 || n != 3 {
		t.Fatalf("partition 2 of 3 says %d of %d", i, n)
	}
}
