// Package mqttbench drives the same MQTT load at Tidemark, on each engine,
// and at peers in the same run: an embedded nats-server (JetStream file
// store, MQTT listener), an embedded mochi-mqtt (Badger storage hook) and,
// when installed and asked for, Eclipse Mosquitto as a child process
// (persistence off); and reports throughput, acknowledgement latency and
// delivery correctness side by side.
//
// # Load
//
// A point is a QoS, a window and a number of publisher connections. Each
// publisher is a pipelined MQTT 3.1.1 client on package packet (the only
// protocol level all the brokers speak) that keeps up to window PUBLISHes
// of 64 bytes unacknowledged, measures each message's latency from its
// write to its PUBACK (QoS 1) or PUBCOMP (QoS 2), and answers PUBREC with
// PUBREL itself. QoS 0 has no acknowledgement, so its window counts the
// messages the subscriber has not yet received and its latency is publish
// to delivery: the point measures sustained delivery, not how fast each
// broker can read and drop messages it has no room for.
//
// At window 1 the client and the broker take turns, so a rate is the
// pair's and the client's own cost per exchange matters. Against a broker
// in a process of its own, a QoS 1 or 2 point of at most four connections
// runs on blocking sockets (fdConn) with a processor to spare, which spares each
// read the runtime poller's round trips; Result.ClientMicros and
// Result.BrokerMicros say what each side spent per exchange.
//
// # Correctness
//
// One subscriber per point, subscribed at the point's QoS to every
// publisher's topic, checks each message against what the publishers had
// acknowledged: lost (acknowledged, never delivered), duplicated (delivered
// twice; for QoS 2 a retransmitted PUBLISH of an exchange still awaiting
// its PUBREL does not count) and reordered (delivered after a later message
// of the same publisher). A point waits for the subscriber to drain, so a
// slow delivery path shows as a long run, not as loss.
//
// # Isolation
//
// Every point starts its broker afresh in its own data directory, listening
// on 127.0.0.1 only, and stops it before the next point; the benchmark ends
// nothing it did not start. mosquitto runs from a configuration written
// into that directory, on a free port, in a process group of its own; the
// point stops that very process (SIGTERM, then SIGKILL after a timeout),
// and on Linux the kernel kills it should the benchmark die first.
//
// # Build
//
// The embedded peers follow the engine build tags: nojetstream leaves out
// the nats-server peer and nobadger the mochi peer (it stores through
// Badger), so a binary built without those engines links neither library.
// Peer then says which tag removed the peer.
package mqttbench
