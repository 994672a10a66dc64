package main

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/tidemark-io/tidemark/bench/commitbench"
	"github.com/tidemark-io/tidemark/engine"
)

// benchCmd is `tidemark bench`: the MQTT benchmark, also as `bench mqtt`,
// and the engine commit benchmark as `bench commits`.
func benchCmd() *cobra.Command {
	cmd := mqttBenchCmd("bench")
	cmd.AddCommand(mqttBenchCmd("mqtt"), commitsBenchCmd(), fleetBenchCmd(), clusterBenchCmd(), partitionsBenchCmd(), peerBenchCmd())
	return cmd
}

func commitsBenchCmd() *cobra.Command {
	var engines []string
	var dur time.Duration
	var syncMode string
	cmd := &cobra.Command{
		Use:   "commits",
		Short: "Measure synced commits per engine beside a raw fdatasync loop",
		Example: `  tidemark bench commits
  tidemark bench commits --engines pebble,badger --duration 3s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(engines) == 0 {
				engines = engine.Drivers()
			}
			mode, err := engine.ParseSyncMode(syncMode)
			if err != nil {
				return fmt.Errorf("--sync: %w", err)
			}
			if dur <= 0 {
				return fmt.Errorf("--duration %v: must be positive", dur)
			}
			for _, e := range engines {
				if _, err := engine.Lookup(e); err != nil {
					return fmt.Errorf("--engines: %w", err)
				}
			}
			dir, err := os.MkdirTemp("", "tidemark-bench-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			fsync, err := commitbench.FsyncRate(dir, time.Second)
			if err != nil {
				return fmt.Errorf("fsync probe: %w", err)
			}
			fsyncInPlace, err := commitbench.FsyncRateInPlace(dir, time.Second)
			if err != nil {
				return fmt.Errorf("fsync probe: %w", err)
			}
			bar := progressbar.NewOptions(len(engines)*len(commitbench.CommitLoads),
				progressbar.OptionSetWriter(cmd.ErrOrStderr()), progressbar.OptionShowCount(), progressbar.OptionClearOnFinish())
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintf(tw, "engine\tsubmitters\twrites/commit\tfollower\tcommits/s\twrites/s\tp50 ms\tp99 ms\tx fsync\tx 1-submitter\t\n")
			fmt.Fprintf(tw, "raw fdatasync\t1\t1\t\t%.0f\t%.0f\t\t\t1.00\t\t\n", fsync, fsync)
			fmt.Fprintf(tw, "raw fdatasync, in place\t1\t1\t\t%.0f\t%.0f\t\t\t%.2f\t\t\n", fsyncInPlace, fsyncInPlace, fsyncInPlace/fsync)
			for i, name := range engines {
				base := map[int]float64{}
				for _, load := range commitbench.CommitLoads {
					bar.Describe(fmt.Sprintf("%s %dx%d", name, load.Submitters, load.Writes))
					e, err := engine.Open(cmd.Context(), name, engine.Options{Dir: fmt.Sprintf("%s/%d-%d-%d-%d", dir, i, load.Submitters, load.Writes, load.Follower), Sync: mode})
					if err != nil {
						return fmt.Errorf("open %s: %w", name, err)
					}
					// Calibrate the commit count to the duration asked for.
					probe, err := commitbench.RunCommits(e, load, 4*load.Submitters)
					n := max(int(probe.PerSecond()*dur.Seconds()), load.Submitters)
					var st commitbench.CommitStats
					if err == nil {
						st, err = commitbench.RunCommits(e, load, n)
					}
					e.Close()
					if err != nil {
						return fmt.Errorf("%s: %w", name, err)
					}
					if load.Submitters == 1 && load.Follower == commitbench.NoFollower {
						base[load.Writes] = st.PerSecond()
					}
					fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%.0f\t%.0f\t%.2f\t%.2f\t%.2f\t%.1f\t\n", name, load.Submitters, load.Writes, load.Follower,
						st.PerSecond(), st.PerSecond()*float64(load.Writes), ms(st.P50), ms(st.P99), st.PerSecond()/fsync, st.PerSecond()/base[load.Writes])
					_ = bar.Add(1)
				}
			}
			_ = bar.Finish()
			fmt.Fprintf(cmd.OutOrStdout(), "sync=%s, 64-byte values; each write is one put plus one log entry; a follower commits once after each commit of its submitter (plain, or deferred: engine.Batch.Defer), not counted\n", mode)
			return tw.Flush()
		},
	}
	cmd.Flags().StringSliceVar(&engines, "engines", nil, "engines to measure (default: all compiled in: "+strings.Join(engine.Drivers(), ", ")+")")
	cmd.Flags().DurationVar(&dur, "duration", 2*time.Second, "approximate time per measured point")
	cmd.Flags().StringVar(&syncMode, "sync", "always", "durability: always, interval or none")
	return cmd
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
