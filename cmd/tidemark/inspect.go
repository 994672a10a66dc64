package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/tidemark-io/tidemark/engine"
)

func inspectCmd() *cobra.Command {
	var ef engineFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "inspect",
		Short:   "Describe the data in a data directory",
		Example: `  tidemark inspect --data ./data --engine pebble --json`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := ef.options()
			if err != nil {
				return err
			}
			e, err := engine.Open(cmd.Context(), ef.name, opts)
			if err != nil {
				return fmt.Errorf("open engine: %w", err)
			}
			defer e.Close()
			st, err := e.LogStats(cmd.Context())
			if err != nil {
				return err
			}
			report := map[string]any{
				"engine": ef.name, "data": ef.data, "granularity": e.Granularity().String(),
				"log": map[string]any{"entries": st.Entries, "bytes": st.Bytes, "first": st.First, "last": st.Last, "floor": st.Floor},
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(report)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "engine %s (%s log keys), data %s\nlog: %d entries, %d bytes, keys %d..%d, truncation floor %d\n",
				ef.name, e.Granularity(), ef.data, st.Entries, st.Bytes, st.First, st.Last, st.Floor)
			return nil
		},
	}
	ef.register(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
