//go:build !nojetstream

package jetstream

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestAckerMatchesAnswers publishes through an acker of its own on a
// single-writer engine's connection: consecutive publishes get
// consecutive sequences, the late answer to an abandoned publish is not
// taken for the next one's, and the stream's refusals come back as the
// errors the committer tells apart.
func TestAckerMatchesAnswers(t *testing.T) {
	d := openWALAt(t, t.TempDir())
	defer d.Close()
	a, err := newAcker(d.nc)
	if err != nil {
		t.Fatal(err)
	}
	fence := func() *nats.Msg {
		m := &nats.Msg{Subject: d.fenceSubj, Header: nats.Header{}}
		m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
		return m
	}
	first, err := a.publish(t.Context(), d.nc, fence())
	if err != nil {
		t.Fatal(err)
	}
	second, err := a.publish(t.Context(), d.nc, fence())
	if err != nil {
		t.Fatal(err)
	}
	if second.Sequence != first.Sequence+1 || second.Stream != d.name {
		t.Fatalf("second publish acknowledged as %+v after %+v", second, first)
	}

	// Given up before its answer came: the answer is left in the queue.
	gone, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := a.publish(gone, d.nc, fence()); !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned publish: %v", err)
	}
	third, err := a.publish(t.Context(), d.nc, fence())
	if err != nil {
		t.Fatal(err)
	}
	if third.Sequence != second.Sequence+2 {
		t.Fatalf("publish after an abandoned one acknowledged at %d, want %d", third.Sequence, second.Sequence+2)
	}

	// Refused by the stream: an API error, as from jetstream.PublishMsg.
	m := fence()
	m.Header.Set(jetstream.ExpectedLastSeqHeader, "1")
	var apiErr *jetstream.APIError
	if _, err := a.publish(t.Context(), d.nc, m); !errors.As(err, &apiErr) {
		t.Fatalf("publish with a wrong expected sequence: %v, want an API error", err)
	}
	// No stream takes the subject.
	if _, err := a.publish(t.Context(), d.nc, &nats.Msg{Subject: "nowhere"}); !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("publish to a subject no stream takes: %v", err)
	}
}
