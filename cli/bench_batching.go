package cli

import (
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/zonefold/zonefold/bench"
)

func newBenchBatchingCmd() *cobra.Command {
	var o bench.BatchingOptions
	cmd := &cobra.Command{
		Use:   "batching",
		Short: "Plugged vs unplugged submission: one kernel entry per batch vs per I/O",
		Long: `Runs 4 KiB operations at queue depth 128, once plugged (all SQEs of a
round enter the kernel together) and once unplugged (one io_uring_enter per
I/O), on NOP operations and on O_DIRECT writes to a real file. The two
configurations alternate in rounds so that both see the same machine noise.
Seed: the aio "implement request batching" series (2x at 4k O_DIRECT QD128).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return bench.Batching(cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	countVar(f, &o.QD, "qd", 128, "operations in flight per round")
	intSizeVar(f, &o.BS, "bs", 4096, "write size for the file target (e.g. 4K)")
	f.DurationVar(&o.Duration, "time", 2*time.Second, "total time per configuration and target")
	countVar(f, &o.Rounds, "rounds", 8, "alternating rounds the time is split into")
	pathVar(f, &o.Dir, "dir", os.TempDir(), "folder", "folder for the file target's scratch file")
	sizeVar(f, &o.FileSize, "file-size", 64<<20, "size of the scratch file (e.g. 64M)")
	f.BoolVar(&o.JSON, "json", false, "print one JSON object instead of a table")
	return cmd
}
