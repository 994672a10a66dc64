package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/tidemark-io/tidemark/bench/fleet"
	"github.com/tidemark-io/tidemark/engine"
)

func fleetBenchCmd() *cobra.Command {
	var engines, peers, sessions []string
	var syncMode, dir string
	var fan int
	cmd := &cobra.Command{
		Use:   "fleet",
		Short: "Measure a fleet of persistent sessions: memory per session, setup, spread and fan-out delivery, reconnect storm",
		Long: `Connects a fleet of persistent MQTT 3.1.1 sessions (each subscribed to a topic of its own and
to one shared by all) to Tidemark on each selected engine, run as a 'tidemark serve' process, and to
mosquitto (persistence on) in the same run, one broker at a time, and measures: sessions set up per
second, resident memory per connected session, deliveries per second of one message per device and
of messages to all, and the rate of reconnecting every session after all dropped. Every delivery
is checked for loss and duplicates. A process may hold at most as many sockets as its open-file
limit, and the client side holds one per session.`,
		Example: `  tidemark bench fleet --sessions 1000,10000
  tidemark bench fleet --sessions 19000 --engines pebble --sync always --peers mosquitto`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find the tidemark binary: %w", err)
			}
			var brokers []fleet.Broker
			for _, e := range engines {
				if _, err := engine.Lookup(e); err != nil {
					return fmt.Errorf("--engines: %w", err)
				}
				brokers = append(brokers, fleet.Tidemark(self, e, syncMode))
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
				case "", "none":
				default:
					return fmt.Errorf("--peers %q: the fleet benchmark knows mosquitto (or none)", p)
				}
			}
			var ns []int
			for _, s := range sessions {
				n, err := strconv.Atoi(strings.TrimSpace(s))
				if err != nil || n <= 0 {
					return fmt.Errorf("--sessions %q: want positive whole numbers, e.g. 1000,10000", s)
				}
				ns = append(ns, n)
			}
			if dir == "" {
				if dir, err = os.MkdirTemp("", "tidemark-fleet-"); err != nil {
					return err
				}
				defer os.RemoveAll(dir)
			}
			out := cmd.OutOrStdout()
			rs := fleet.Run(cmd.Context(), fleet.Config{Brokers: brokers, Sessions: ns, FanoutMessages: fan, Dir: dir,
				Progress: func(s string) { fmt.Fprintln(cmd.ErrOrStderr(), s) }})
			fmt.Fprint(out, fleet.Table(rs))
			for _, r := range rs {
				if r.Err != nil || r.Lost > 0 {
					return fmt.Errorf("%s at %d sessions: lost %d, error %v", r.Broker, r.Sessions, r.Lost, r.Err)
				}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringSliceVar(&engines, "engines", []string{"pebble"}, "Tidemark engines to run")
	fs.StringSliceVar(&peers, "peers", []string{"mosquitto"}, "peers to run beside (mosquitto, or none)")
	fs.StringSliceVar(&sessions, "sessions", []string{"1000"}, "fleet sizes")
	fs.StringVar(&syncMode, "sync", "always", "Tidemark's sync mode: always, interval or none")
	fs.IntVar(&fan, "fanout", 20, "messages sent to every session in the fan-out load")
	fs.StringVar(&dir, "dir", "", "data directory for the brokers (default: a temporary one)")
	return cmd
}
