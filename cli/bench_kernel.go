package cli

import (
	"github.com/spf13/cobra"

	"github.com/zonefold/zonefold/bench"
)

func newBenchKernelCmd() *cobra.Command {
	var o bench.KernelOptions
	cmd := &cobra.Command{
		Use:   "kernel DIR",
		Short: "Each seed fio job through the daemon and through the kernel's page cache in DIR; ratio of medians",
		Long: `Runs each seed job file of testdata/fio (not the verify-* ones) two ways,
alternating in rounds: fio with zonefold's engine (fio/engine.c) against a
daemon this process serves on a freshly formatted device, and fio's own
io_uring engine (buffered: the kernel's page cache) in DIR. Prints per job
the median, min and max MiB/s of each side, each side's spread (max/min) and
the ratio of the medians (zonefold/kernel).

Two device modes:

  null  the daemon serves null:?size=16G&zone_size=256M (no storage): the CPU
        path, against a tmpfs DIR (e.g. /dev/shm), whose page cache has no
        disk behind it either.
  emu   the daemon serves an emu device whose file is DIR/zonefold-bench-
        kernel.dev: the same disk and file system as the kernel side, and
        durability included where a job fsyncs (4x1m-end-fsync).

Every run of either side starts from the same state: new files. fio gets
a fresh directory under DIR each run and lays its files out with fallocate
before it times (its default); the emu device gets a new file each run,
formatted and allocated with fallocate the same way (sparse on tmpfs), and
removed after. Neither side times block allocation, and no run overwrites
blocks an earlier run wrote.

--mode auto (the default) takes null for a tmpfs DIR and emu otherwise.
--scale multiplies every job's size. It is 16 by default: at the seed
files' own sizes (--scale 1) a run lasts 10-70 ms on a 2-core machine, and
at 4 (the former default) 15-50 ms, where a scheduler hiccup, a Go
collector cycle or the daemon's first moments move a run by a third to a
half (zonefold spreads of 1.3-2.0); at 16 runs last 60-500 ms. --cache is
by default twice the largest job's bytes (at least 512 MiB; 4 GiB at
--scale 16), so that zonefold, which throttles writers above half its
cache, writes a job as the kernel side does, without throttling (its
dirty limit is a fifth of the machine's memory). Needs fio and the
engine (make fio-engine).`,
		Example: `  zonefold bench kernel /dev/shm            # null: vs tmpfs
  zonefold bench kernel /mnt/ext4 --mode emu  # emu on ext4 vs ext4`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch o.Mode {
			case bench.KernelAuto, bench.KernelNull, bench.KernelEmu:
			default:
				return usagef("--mode %q: want auto, null or emu", o.Mode)
			}
			if o.Rounds < 1 {
				return usagef("--rounds: must be more than 0")
			}
			if o.Scale <= 0 {
				return usagef("--scale: must be more than 0")
			}
			if o.Config.CacheBytes != 0 && o.Config.CacheBytes < 1<<20 {
				return usagef("--cache: at least 1 MiB")
			}
			o.Dir = args[0]
			if !o.JSON && isTerminal(cmd.ErrOrStderr()) {
				o.Progress = cmd.ErrOrStderr()
			}
			return bench.Kernel(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Mode, "mode", bench.KernelAuto, "zonefold's device: null, emu (a file in DIR) or auto (null on tmpfs, else emu)")
	countVar(f, &o.Rounds, "rounds", 5, "alternating rounds of each side per job")
	numberVar(f, &o.Scale, "scale", 16, "multiply every job's size by this (1: the seed files' own sizes)")
	pathVar(f, &o.JobsDir, "jobs", "testdata/fio", "directory", "directory of the seed job files")
	f.StringSliceVar(&o.Jobs, "job", nil, "run only these jobs (file names without .fio; repeatable)")
	sizeVar(f, &o.Config.CacheBytes, "cache", 0, "the daemon's folio cache size (default twice the largest job's bytes, at least 512MiB)")
	f.StringVar(&o.FioEngine, "fio-engine", "", "the engine .so (default $ZONEFOLD_FIO_ENGINE, else build/fio/zonefold-engine.so)")
	f.BoolVar(&o.JSON, "json", false, "print the results as JSON")
	return cmd
}
