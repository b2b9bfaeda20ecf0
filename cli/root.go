// Package cli holds zonefold's cobra commands. It owns flag parsing and
// printing only: every command calls into the engine's packages and turns
// their results into tables or JSON. Errors reach the user as one line on
// stderr and a non-zero exit status; nothing here panics on input.
package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/spf13/cobra"
)

// Main runs the command line args and returns the process exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "zonefold:", err)
		return 1
	}
	return 0
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	var verbose bool
	var cpuProfile string
	var profile *os.File
	root := &cobra.Command{
		Use:           "zonefold",
		Short:         "A userspace engine for zoned storage",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			level := slog.LevelWarn
			if verbose {
				level = slog.LevelDebug
			}
			slog.SetDefault(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})))
			if cpuProfile == "" {
				return nil
			}
			f, err := os.Create(cpuProfile)
			if err != nil {
				return fmt.Errorf("--cpuprofile: %w", err)
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				f.Close()
				return fmt.Errorf("--cpuprofile: %w", err)
			}
			profile = f
			return nil
		},
		PersistentPostRun: func(*cobra.Command, []string) {
			if profile != nil {
				pprof.StopCPUProfile()
				profile.Close()
			}
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().BoolVarP(&verbose, "verbose", "v", false, "log debug messages")
	root.PersistentFlags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the command to this file (go tool pprof)")
	root.AddCommand(newBenchCmd())
	root.AddCommand(newZonesCmd())
	root.AddCommand(newFormatCmd())
	root.AddCommand(newFsckCmd())
	root.AddCommand(newDebugCmd())
	root.AddCommand(newServeCmd())
	addClientCmds(root)
	return root
}

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmarks that compare two configurations in one run",
	}
	cmd.AddCommand(newBenchBatchingCmd())
	cmd.AddCommand(newBenchRunCmd())
	cmd.AddCommand(newBenchFoliosCmd())
	cmd.AddCommand(newBenchFioCmd())
	cmd.AddCommand(newBenchGCCmd())
	cmd.AddCommand(newBenchSeedsCmd())
	cmd.AddCommand(newBenchPeersCmd())
	return cmd
}
