package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/spf13/cobra"
	"github.com/tidemark-io/tidemark/bench/fleet"
	"github.com/tidemark-io/tidemark/bench/mqttbench"
	"github.com/tidemark-io/tidemark/engine"
)

func fleetBenchCmd() *cobra.Command {
	var engines, peers, sessions, offline, serveFlags []string
	var syncMode, dir string
	var fan, spread, reconnects, rounds int
	var showTimeline bool
	cmd := &cobra.Command{
		Use:   "fleet",
		Short: "Measure a fleet of persistent sessions: memory per session, setup, spread and fan-out delivery, reconnect storm",
		Long: `Connects a fleet of persistent MQTT 3.1.1 sessions (each subscribed to a topic of its own and to one
shared by all) to Tidemark on each selected engine, run as a 'tidemark serve' process, and to the
peers in the same run (mosquitto with persistence on; nats-server with JetStream and mochi with its
Badger store, each run by this binary as a process of its own), one broker at a time, and measures:
sessions set up per second, resident memory per connected session, deliveries per second of messages
each to one device's own topic (a message per device, in as many rounds as make at least 10,000) and
of messages to all, and the rate of reconnecting every session after all dropped. Every delivery is
checked for loss and duplicates: what a broker has not delivered when no delivery has come for 15 s
counts as lost. Only Tidemark's failures and losses make the command fail; a peer's are in the
table. A process may hold at most as many sockets as its open-file limit, and the client side holds
one per session.

With --offline, it measures offline sessions instead, on Tidemark alone: for each number given it
stores that many persistent sessions (each subscribed to a topic of its own) directly in a fresh
data directory, as a CONNECT, a SUBSCRIBE and a disconnect would leave them, starts the broker
on it and reports its resident memory and the time to reconnect sessions picked at random
(CONNECT with clean session off, CONNACK with the session present, and the one message
published to the session's topic while it was offline).`,
		Example: `  tidemark bench fleet --sessions 1000,10000
  tidemark bench fleet --sessions 19000 --engines pebble --sync always --peers mosquitto
  tidemark bench fleet --offline 10,1000000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find the tidemark binary: %w", err)
			}
			if len(offline) > 0 {
				return runOfflineBench(cmd, self, engines, syncMode, dir, offline, reconnects)
			}
			var brokers []fleet.Broker
			for _, e := range engines {
				if _, err := engine.Lookup(e); err != nil {
					return fmt.Errorf("--engines: %w", err)
				}
				brokers = append(brokers, fleet.Tidemark(self, e, syncMode, serveFlags...))
			}
			for _, p := range peers {
				switch p {
				case "mosquitto":
					bin, err := exec.LookPath("mosquitto")
					if err != nil {
						if _, serr := os.Stat("/usr/sbin/mosquitto"); serr != nil {
							return fmt.Errorf("--peers mosquitto: not installed (apt-get install mosquitto)")
						}
						bin = "/usr/sbin/mosquitto"
					}
					brokers = append(brokers, fleet.Mosquitto(bin))
				case "nats", "mochi":
					if _, err := mqttbench.Peer(p, engine.SyncAlways, 0); err != nil {
						return fmt.Errorf("--peers %s: %w", p, err)
					}
					brokers = append(brokers, fleet.Embedded(self, p, syncMode))
				case "", "none":
				default:
					return fmt.Errorf("--peers %q: the fleet benchmark knows mosquitto, nats and mochi (or none)", p)
				}
			}
			ns, err := positiveInts("--sessions", "1000,10000", sessions)
			if err != nil {
				return err
			}
			if dir == "" {
				if dir, err = os.MkdirTemp("", "tidemark-fleet-"); err != nil {
					return err
				}
				defer os.RemoveAll(dir)
			}
			out := cmd.OutOrStdout()
			if rounds < 1 || rounds > 99 {
				return fmt.Errorf("--rounds %d: allowed 1 to 99", rounds)
			}
			if spread < 1 {
				return fmt.Errorf("--spread-messages %d: give 1 or more (default %d)", spread, fleet.DefaultSpreadMessages)
			}
			rs := fleet.Run(cmd.Context(), fleet.Config{Brokers: brokers, Sessions: ns, FanoutMessages: fan, SpreadMessages: spread, Rounds: rounds, Dir: dir,
				Progress: func(s string) { fmt.Fprintln(cmd.ErrOrStderr(), s) }})
			fmt.Fprint(out, fleet.Table(rs))
			if showTimeline {
				fmt.Fprint(out, fleet.TimelineTable(rs))
			}
			// A peer's failure or loss is a finding the table shows;
			// Tidemark's fails the run.
			for _, r := range rs {
				if !strings.HasPrefix(r.Broker, "tidemark/") {
					continue
				}
				if r.Err != nil {
					return fmt.Errorf("%s at %d sessions: %w", r.Broker, r.Sessions, r.Err)
				}
				if r.Lost > 0 {
					return fmt.Errorf("%s at %d sessions: lost %d deliveries", r.Broker, r.Sessions, r.Lost)
				}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringSliceVar(&engines, "engines", []string{"pebble"}, "Tidemark engines to run")
	fs.StringSliceVar(&peers, "peers", []string{"mosquitto"}, "peers to run beside, each a process of its own: mosquitto, nats (nats-server with JetStream, fsyncing as --sync says), mochi (with its Badger store), or none")
	fs.StringSliceVar(&sessions, "sessions", []string{"1000"}, "fleet sizes")
	fs.BoolVar(&showTimeline, "timeline", false, "also print the spread's deliveries in 100 ms windows of publication time (count, p50, p99, max, over 50 ms): where in the load the slow ones were")
	fs.StringVar(&syncMode, "sync", "always", "Tidemark's sync mode: always, interval or none")
	fs.StringArrayVar(&serveFlags, "serve-flag", nil, "a further flag for every Tidemark 'serve' (repeatable), e.g. --serve-flag=--metrics=127.0.0.1:9091 to read its profiles during the run")
	fs.IntVar(&fan, "fanout", 20, "messages sent to every session in the fan-out load")
	fs.IntVar(&spread, "spread-messages", fleet.DefaultSpreadMessages, "the fewest messages of the spread load: each session gets as many rounds of one message as make at least this many (the default lasts under a second; a load of several seconds includes Tidemark's timed checkpoint writes, as a sustained load does)")
	fs.IntVar(&rounds, "rounds", 1, "measure every broker this many times at each size, the brokers in turn, and report the median of each figure: on a busy machine, 3 make ratios worth quoting")
	fs.StringVar(&dir, "dir", "", "data directory for the brokers (default: a temporary one)")
	fs.StringSliceVar(&offline, "offline", nil, "measure this many offline sessions on disk instead of a connected fleet (Tidemark only), e.g. 10,1000000")
	fs.IntVar(&reconnects, "reconnects", 20, "with --offline: sessions reconnected at random at each size")
	return cmd
}

// runOfflineBench runs the offline load of `tidemark bench fleet`.
func runOfflineBench(cmd *cobra.Command, self string, engines []string, syncMode, dir string, offline []string, reconnects int) error {
	if reconnects <= 0 {
		return fmt.Errorf("--reconnects %d: want a positive number", reconnects)
	}
	ns, err := positiveInts("--offline", "10,1000000", offline)
	if err != nil {
		return err
	}
	var brokers []fleet.Broker
	for _, e := range engines {
		if _, err := engine.Lookup(e); err != nil {
			return fmt.Errorf("--engines: %w", err)
		}
		// Frequent retention passes, so the memory read includes them.
		brokers = append(brokers, fleet.Tidemark(self, e, syncMode, "--retention-every", "1s"))
	}
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "tidemark-fleet-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	rs := fleet.RunOffline(cmd.Context(), fleet.OfflineConfig{Brokers: brokers, Offline: ns, Reconnects: reconnects, Dir: dir,
		Progress: func(s string) { fmt.Fprintln(cmd.ErrOrStderr(), s) }})
	fmt.Fprint(cmd.OutOrStdout(), fleet.OfflineTable(rs))
	for _, r := range rs {
		if r.Err != nil {
			return fmt.Errorf("%s with %d offline sessions: %w", r.Broker, r.Offline, r.Err)
		}
	}
	return nil
}
