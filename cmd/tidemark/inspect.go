package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/table"
)

// inspectReport is what `tidemark inspect` shows.
type inspectReport struct {
	Engine      string             `json:"engine"`
	Data        string             `json:"data"`
	Granularity string             `json:"granularity"`
	Log         engine.LogStats    `json:"log"`
	Tables      []table.TableStats `json:"tables"`
	// PartitionLogs are the logs of a store split over partitions, in
	// partition order (Log is the first's); Tables then sums the
	// partitions' counts.
	PartitionLogs []engine.LogStats `json:"partition_logs,omitempty"`
	// SessionCount counts every stored session; Sessions lists the first
	// of them by client id, up to --sessions.
	SessionCount int                `json:"session_count"`
	Sessions     []mqtt.SessionInfo `json:"sessions"`
	// Retention is what each retention rule the broker last ran with
	// keeps in the message log.
	Retention []mqtt.RetentionStat `json:"retention,omitempty"`
}

func inspectCmd() *cobra.Command {
	var ef engineFlags
	var pf partitionFlags
	var asJSON bool
	var listMax int
	cmd := &cobra.Command{
		Use:   "inspect",
		Short: "Describe the data in a data directory: tables, sessions, the change log",
		Long: `Open a data directory (the broker must not be running on it) and print its
tables with record counts, the MQTT sessions with their checkpoints,
subscriptions and in-flight QoS 2 state, and the change log's size and keys.
Without --engine, the directory is opened with the engine that wrote it.`,
		Example: `  tidemark inspect --data ./data
  tidemark inspect --data /var/lib/tidemark --engine badger --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := applyConfig(cmd.Flags(), ""); err != nil {
				return err
			}
			ef.fromDirectory(cmd.Flags())
			opts, err := ef.options()
			if err != nil {
				return err
			}
			if err := pf.validate(ef.name); err != nil {
				return err
			}
			// Opening an engine creates its store: a mistyped --data
			// would leave an empty store there and print it as empty.
			if ef.natsURL == "" {
				if entries, err := os.ReadDir(ef.data); err != nil || len(entries) == 0 {
					return fmt.Errorf("--data %s: no data directory there (nothing to inspect); give the directory tidemark serve used", ef.data)
				}
			}
			ctx := cmd.Context()
			es, err := pf.openPartitions(ctx, ef.name, opts, engine.Open)
			if err != nil {
				return fmt.Errorf("open engine %s in %s: %w", ef.name, ef.data, err)
			}
			defer func() {
				for _, e := range es {
					_ = e.Close()
				}
			}()
			parts, err := table.OpenPartitions(ctx, es, table.Options{})
			if err != nil {
				return err
			}
			defer parts.Close()
			db := parts.DB(0)
			r := inspectReport{Engine: ef.name, Data: ef.data, Granularity: es[0].Granularity().String()}
			if r.Log, err = es[0].LogStats(ctx); err != nil {
				return err
			}
			if r.Tables, err = tablesOf(ctx, parts); err != nil {
				return err
			}
			if len(es) > 1 {
				for _, e := range es {
					st, err := e.LogStats(ctx)
					if err != nil {
						return err
					}
					r.PartitionLogs = append(r.PartitionLogs, st)
				}
			}
			if r.Retention, err = mqtt.RetentionInfo(ctx, db); err != nil {
				return err
			}
			if listMax < 0 {
				return fmt.Errorf("--sessions %d: give how many sessions to list, or 0 for all", listMax)
			}
			// A store may hold millions of sessions: count them all, hold
			// only those listed.
			for i := range parts.Count() {
				if err := mqtt.EachSession(ctx, parts.DB(i), func(si mqtt.SessionInfo) bool {
					if r.SessionCount++; listMax == 0 || len(r.Sessions) < listMax {
						r.Sessions = append(r.Sessions, si)
					}
					return true
				}); err != nil {
					return err
				}
			}
			w := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			fmt.Fprintf(w, "engine %s (%s log keys), data %s\n", r.Engine, r.Granularity, r.Data)
			if len(r.PartitionLogs) == 0 {
				fmt.Fprintf(w, "log: %d entries, %d bytes, keys %d..%d, truncated below %d\n\n", r.Log.Entries, r.Log.Bytes, r.Log.First, r.Log.Last, r.Log.Floor)
			} else {
				for i, l := range r.PartitionLogs {
					fmt.Fprintf(w, "partition %d log: %d entries, %d bytes, keys %d..%d, truncated below %d\n", i, l.Entries, l.Bytes, l.First, l.Last, l.Floor)
				}
				fmt.Fprintln(w)
			}
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "table\trecords\tdeleted")
			for _, t := range r.Tables {
				fmt.Fprintf(tw, "%s\t%d\t%d\n", t.Name, t.Live, t.Deleted)
			}
			tw.Flush()
			if len(r.Retention) > 0 {
				fmt.Fprintln(w)
				tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "retention rule\tkeeps\tmessages\tbytes\toldest")
				for _, rs := range r.Retention {
					oldest := "-"
					if !rs.Oldest.IsZero() {
						oldest = rs.Oldest.UTC().Format(time.RFC3339)
					}
					fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", rs.Rule.Filter, rs.Rule.Amount(), rs.Messages, rs.Bytes, oldest)
				}
				tw.Flush()
			}
			fmt.Fprintf(w, "\n%d session(s)", r.SessionCount)
			if len(r.Sessions) < r.SessionCount {
				fmt.Fprintf(w, ", the first %d listed (--sessions 0 lists all)", len(r.Sessions))
			}
			fmt.Fprintln(w)
			tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "client\tprotocol\tonline\texpiry\tcheckpoint\tout qos2\tstaged qos2\tsubscriptions")
			for _, s := range r.Sessions {
				exp := fmt.Sprintf("%ds", s.ExpirySeconds)
				if s.ExpirySeconds == 0xFFFFFFFF {
					exp = "never"
				}
				fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\t%d\t%d\t%s\n", s.ClientID, s.Protocol, s.Online, exp, s.Checkpoint, s.OutboundQoS2, s.StagedQoS2, strings.Join(s.Subscriptions, ", "))
			}
			return tw.Flush()
		},
	}
	ef.register(cmd.Flags())
	cmd.Flags().IntVar(&pf.partitions, "partitions", 1, "the number of partitions the store is split over (serve --partitions)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().IntVar(&listMax, "sessions", 1000, "list at most this many sessions, by client id (0: all); all are counted")
	return cmd
}

// tablesOf returns the tables of every partition, their counts summed
// by name.
func tablesOf(ctx context.Context, parts *table.Partitions) ([]table.TableStats, error) {
	var out []table.TableStats
	at := map[string]int{}
	for i := range parts.Count() {
		ts, err := parts.DB(i).Tables(ctx)
		if err != nil {
			return nil, err
		}
		for _, t := range ts {
			j, ok := at[t.Name]
			if !ok {
				at[t.Name] = len(out)
				out = append(out, t)
				continue
			}
			out[j].Live += t.Live
			out[j].Deleted += t.Deleted
		}
	}
	slices.SortFunc(out, func(a, b table.TableStats) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
