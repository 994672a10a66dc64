// Command tidemark runs the Tidemark MQTT broker and its tools: serve,
// passwd, conformance, bench, inspect and version.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/tidemark-io/tidemark/conformance"
	"github.com/tidemark-io/tidemark/engine"
)

func main() {
	// A conformance kill-9 case re-executes this binary as its child.
	conformance.MaybeRunChild()
	os.Exit(run())
}

// run runs the command line and returns the process's exit code, after
// its deferred calls.
func run() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// After the first signal starts a graceful shutdown, restore the
	// default handling so a second signal ends the process at once.
	go func() {
		<-ctx.Done()
		stop()
	}()
	root := &cobra.Command{
		Use:           "tidemark",
		Short:         "Tidemark: a durable MQTT broker and change-feed table library",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(serveCmd(), passwdCmd(), conformanceCmd(), benchCmd(), inspectCmd(), versionCmd())
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "tidemark:", err)
		return 1
	}
	return 0
}

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version and the engines compiled in",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := "(devel)"
			if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
				v = bi.Main.Version
			}
			fmt.Fprintf(cmd.OutOrStdout(), "tidemark %s\nengines: %s\n", v, strings.Join(engine.Drivers(), ", "))
			for name, why := range engine.Unavailable() {
				fmt.Fprintf(cmd.OutOrStdout(), "not built: %s (%s)\n", name, why)
			}
			return nil
		},
	}
}
