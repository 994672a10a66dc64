//go:build !nojetstream

package jetstream

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tidemark-io/tidemark/engine/driver"
)

// defaultLeaderCheck is how often keepLeader looks by default.
const defaultLeaderCheck = 30 * time.Second

// leaderMoveTimeout bounds waiting for the stream's new leader after a
// step-down, beyond the request itself.
const leaderMoveTimeout = 15 * time.Second

// stepDownRequest is the body of a stream leader step-down that names the
// server to take over.
type stepDownRequest struct {
	Placement struct {
		Preferred string `json:"preferred"`
	} `json:"placement"`
}

type stepDownResponse struct {
	Success bool `json:"success"`
	Error   *struct {
		Description string `json:"description"`
	} `json:"error"`
}

// preferLeader makes server the stream's leader (parameter leader), so
// that the streams of several partitions can lead on different servers:
// each commit goes to its stream's leader, and a server leading several
// streams does the work of all of them. It asks the current leader to step
// down in favour of server and waits until server leads. JetStream keeps
// no preference: after a later election (a server restarting, say) the
// leader is wherever the election put it, until the next open.
func (d *db) preferLeader(ctx context.Context, server string) error {
	var info *jetstream.StreamInfo
	err := d.request(ctx, "stream info "+d.name, attemptTimeout, func(ctx context.Context) error {
		var err error
		info, err = d.st.Info(ctx)
		return err
	})
	if err != nil {
		return err
	}
	if info.Cluster == nil {
		return fmt.Errorf("%w: jetstream parameter leader=%q: stream %s is not on a cluster", driver.ErrInvalidOption, server, d.name)
	}
	if info.Cluster.Leader == server {
		return nil
	}
	peers := []string{info.Cluster.Leader}
	for _, r := range info.Cluster.Replicas {
		peers = append(peers, r.Name)
	}
	if !slices.Contains(peers, server) {
		return fmt.Errorf("%w: jetstream parameter leader=%q: not a server of stream %s (its servers: %s)",
			driver.ErrInvalidOption, server, d.name, strings.Join(peers, ", "))
	}
	for _, r := range info.Cluster.Replicas {
		if r.Name == server && (!r.Current || r.Offline) {
			// A step-down in its favour would elect another server, or
			// none: wait until it is back.
			return fmt.Errorf("jetstream: stream %s: %s is not a current replica (offline %v, current %v)", d.name, server, r.Offline, r.Current)
		}
	}
	var req stepDownRequest
	req.Placement.Preferred = server
	body, _ := json.Marshal(req)
	stepDown := func(from string) error {
		return d.request(ctx, fmt.Sprintf("move the leader of stream %s from %s to %s", d.name, from, server), attemptTimeout, func(ctx context.Context) error {
			msg, err := d.nc.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+d.name, body)
			if err != nil {
				return err
			}
			var resp stepDownResponse
			if err := json.Unmarshal(msg.Data, &resp); err != nil {
				return fmt.Errorf("step-down answer %q: %w", msg.Data, err)
			}
			if resp.Error != nil {
				return fmt.Errorf("step-down refused: %s", resp.Error.Description)
			}
			return nil
		})
	}
	// An election right after another, or a server still catching up,
	// can put the lead elsewhere: ask again until it is where asked.
	wctx, cancel := context.WithTimeout(ctx, leaderMoveTimeout)
	defer cancel()
	leader := info.Cluster.Leader
	for attempt := 1; ; attempt++ {
		if leader != "" {
			if err := stepDown(leader); err != nil {
				return err
			}
		}
		for range 20 {
			select {
			case <-wctx.Done():
				return fmt.Errorf("jetstream: stream %s: %s did not take the lead in %v (%d step-downs; the leader is %q)", d.name, server, leaderMoveTimeout, attempt, leader)
			case <-time.After(100 * time.Millisecond):
			}
			// A request sent while the leader changes may go unanswered:
			// each has a deadline of its own.
			ictx, icancel := context.WithTimeout(wctx, time.Second)
			info, err := d.st.Info(ictx)
			icancel()
			if err != nil || info.Cluster == nil {
				continue
			}
			if leader = info.Cluster.Leader; leader == server {
				d.log.Info("stream leader moved", "stream", d.name, "leader", server, "step_downs", attempt)
				return nil
			}
		}
	}
}

// keepLeader moves the stream's leader back to the server asked for
// (parameter leader) when an election moved it away (that server
// restarting, say), once the server is a current replica again, looking
// every leaderCheck until Close. Every node sharing the stream should ask
// for the same server: nodes asking for different ones would move the
// leader back and forth.
func (d *db) keepLeader() {
	defer close(d.leaderDone)
	tick := time.NewTicker(d.leaderCheck)
	defer tick.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-d.leaderStop
		cancel()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		ictx, icancel := context.WithTimeout(ctx, attemptTimeout)
		info, err := d.st.Info(ictx)
		icancel()
		if err != nil || info.Cluster == nil || info.Cluster.Leader == "" || info.Cluster.Leader == d.leader {
			continue
		}
		current := false
		for _, r := range info.Cluster.Replicas {
			current = current || (r.Name == d.leader && r.Current && !r.Offline)
		}
		if !current {
			continue
		}
		d.log.Info("the stream's leader is not the server asked for; moving it back", "stream", d.name, "leader", info.Cluster.Leader, "asked", d.leader)
		if err := d.preferLeader(ctx, d.leader); err != nil && ctx.Err() == nil {
			d.log.Warn("moving the stream's leader back failed; trying again later", "stream", d.name, "asked", d.leader, "err", err)
		}
	}
}
