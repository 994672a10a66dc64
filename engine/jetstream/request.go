//go:build !nojetstream

package jetstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Waiting for a cluster that is still starting (see request).
const (
	// attemptTimeout bounds one attempt of a request made while opening:
	// a JetStream API request sent before the cluster elected its meta
	// leader is never answered, so it is sent again rather than awaited.
	attemptTimeout = 3 * time.Second
	// createTimeout bounds one attempt at creating the stream, which the
	// server answers only once the replicas formed their group.
	createTimeout = 5 * time.Second
	// defaultStartTimeout bounds opening as a whole when the caller's
	// context has no deadline (parameter start_timeout).
	defaultStartTimeout = 2 * time.Minute
	maxRetryWait        = 2 * time.Second
	// firstAttempt bounds the first attempt of a request; each retry
	// doubles it up to the request's own bound. A server that has just
	// restarted answers JetStream requests only once it rejoined the
	// cluster, a second or so later: a short first wait finds that out
	// without spending the whole bound of a request that is slow for
	// good reason (a stream whose replicas are still forming).
	firstAttempt = time.Second
)

// JetStream API error codes a starting cluster answers for a while.
const (
	errCodeNoPeers         = 10005 // no suitable peers for placement (not all servers up yet)
	errCodeClusterNotAvail = 10008 // JetStream system temporarily unavailable
	errCodeInsufficient    = 10023 // insufficient resources (peers still joining)
	errCodeStreamNameExist = 10058 // another node created the stream at the same moment
	errCodeStreamOffline   = 10118
	errCodeNoMessage       = 10037 // no message found (stream message get)
)

// errNotReady marks an answer that means "not yet" where it is given:
// the stream another node just created, not yet found by the server
// asked.
var errNotReady = errors.New("not ready yet")

// request runs fn, one request to NATS, with a deadline of attempt
// (within ctx; firstAttempt, doubling, for the first tries), and runs it again while the answer is one a cluster that
// is still starting gives: no answer, no responders, a lost connection,
// JetStream temporarily unavailable, not enough servers for the stream's
// replicas, or a stream another node created at the same moment. Each
// retry logs what it waits for, so an open that waits is never silent.
// It returns fn's error wrapped with what, once fn fails for another
// reason or ctx ends.
func (d *db) request(ctx context.Context, what string, attempt time.Duration, fn func(ctx context.Context) error) error {
	start := time.Now()
	wait := 100 * time.Millisecond
	for n := 1; ; n++ {
		actx, cancel := context.WithTimeout(ctx, min(attempt, firstAttempt<<min(n-1, 8)))
		err := fn(actx)
		cancel()
		if err == nil {
			if n > 1 {
				d.log.Info("NATS answered", "request", what, "attempts", n, "waited", time.Since(start).Round(time.Millisecond))
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("jetstream: %s: no answer in %v (last error: %w): %w", what, time.Since(start).Round(time.Second), err, ctx.Err())
		}
		if !retryable(err) {
			return fmt.Errorf("jetstream: %s: %w", what, err)
		}
		d.log.Warn("waiting for NATS", "request", what, "attempt", n, "waited", time.Since(start).Round(time.Millisecond), "err", err)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return fmt.Errorf("jetstream: %s: no answer in %v (last error: %w): %w", what, time.Since(start).Round(time.Second), err, ctx.Err())
		}
		wait = min(2*wait, maxRetryWait)
	}
}

// retryable reports whether err is what a cluster that is starting, or
// electing a leader, answers for a while.
func retryable(err error) bool {
	if errors.Is(err, errNotReady) {
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case errCodeNoPeers, errCodeClusterNotAvail, errCodeInsufficient, errCodeStreamNameExist, errCodeStreamOffline:
			return true
		}
		return false
	}
	return errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrNoServers) ||
		errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, nats.ErrConnectionReconnecting)
}
