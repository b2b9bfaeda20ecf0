package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/zonefold/zonefold/bench"
)

func newBenchKernelCmd() *cobra.Command {
	var o bench.KernelOptions
	var cache string
	cmd := &cobra.Command{
		Use:   "kernel DIR",
		Short: "Each seed fio job through the daemon and through the kernel's page cache in DIR; ratio of medians",
		Long: `Runs each seed job file of testdata/fio (not the verify-* ones) two ways,
alternating in rounds: fio with zonefold's engine (fio/engine.c) against a
daemon this process serves on a freshly formatted device, and fio's own
io_uring engine (buffered: the kernel's page cache) in DIR. Prints per job
the median, min and max MB/s of each side, each side's spread (max/min) and
the ratio of the medians (zonefold/kernel).

Two device modes:

  null  the daemon serves null:?size=16G&zone_size=256M (no storage): the CPU
        path, against a tmpfs DIR (e.g. /dev/shm), whose page cache has no
        disk behind it either.
  emu   the daemon serves an emu device whose file is DIR/zonefold-bench-
        kernel.dev: the same disk and file system as the kernel side, and
        durability included where a job fsyncs (4x1m-end-fsync).

--mode auto (the default) takes null for a tmpfs DIR and emu otherwise.
--scale multiplies every job's size (e.g. 8 for runs long enough to rise
above a busy machine's noise). Needs fio and the engine (make fio-engine).`,
		Example: `  zonefold bench kernel /dev/shm            # null: vs tmpfs
  zonefold bench kernel /mnt/ext4 --mode emu  # emu on ext4 vs ext4`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := parseSize(cache)
			if err != nil {
				return fmt.Errorf("--cache: %w", err)
			}
			o.Config.CacheBytes = n
			o.Dir = args[0]
			if !o.JSON && isTerminal(cmd.ErrOrStderr()) {
				o.Progress = cmd.ErrOrStderr()
			}
			return bench.Kernel(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Mode, "mode", bench.KernelAuto, "zonefold's device: null, emu (a file in DIR) or auto (null on tmpfs, else emu)")
	f.IntVar(&o.Rounds, "rounds", 5, "alternating rounds of each side per job")
	f.Float64Var(&o.Scale, "scale", 1, "multiply every job's size by this")
	f.StringVar(&o.JobsDir, "jobs", "testdata/fio", "directory of the seed job files")
	f.StringSliceVar(&o.Jobs, "job", nil, "run only these jobs (file names without .fio; repeatable)")
	f.StringVar(&cache, "cache", "512M", "the daemon's folio cache size")
	f.StringVar(&o.FioEngine, "fio-engine", "", "the engine .so (default $ZONEFOLD_FIO_ENGINE, else build/fio/zonefold-engine.so)")
	f.BoolVar(&o.JSON, "json", false, "print the results as JSON")
	return cmd
}
