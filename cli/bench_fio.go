package cli

import (
	"github.com/spf13/cobra"

	"github.com/zonefold/zonefold/bench"
)

type fioBenchOpts struct {
	runOpts
	fioEngine string
	rounds    int
}

func newBenchFioCmd() *cobra.Command {
	var o fioBenchOpts
	cmd := &cobra.Command{
		Use:   "fio DEVICE",
		Short: "The same workload through fio + engine + daemon and in process; prints both and the ratio",
		Long: `Runs one workload two ways on DEVICE (formatted afresh before each run,
erasing it): fio with fio/engine.c against a daemon serving DEVICE from this
process, and the workload in process (what 'bench run' does). The two
alternate in rounds so both see the same machine noise; the ratio
daemon/in-process is what the daemon's protocol costs (goal: >= 0.8).
Workload flags and presets are those of 'bench run'; each file is one fio
job with the workload's iodepth, and --loops N is the job's loops=N, so both
sides go over each file N times (not with --end-fsync: fio syncs after every
loop). Needs fio and the engine (make fio-engine).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ro, w, cfg, err := o.runOpts.resolve(cmd)
			if err != nil {
				return err
			}
			if w.Loops > 1 && w.EndFsync {
				// fio syncs each file at the end of every loop (its
				// end_fsync ends each pass), the in-process side
				// once at the end: a ratio of two workloads.
				return usagef("--loops %d with --end-fsync: fio's side syncs each file after every loop, the in-process side once at the end; give --end-fsync=false (the 4x1m preset sets it)", o.loops)
			}
			if o.rounds < 1 {
				// bench.Fio's own refusal exited 1, after the
				// device was checked.
				return usagef("--rounds %d: want at least 1", o.rounds)
			}
			if err := refuseStartOver(args[0], ro.force, "give --force too, or drop format=1"); err != nil {
				return err
			}
			return bench.Fio(cmd.Context(), cmd.OutOrStdout(), args[0],
				bench.FioOptions{Workload: w, Config: cfg, FioEngine: o.fioEngine, Rounds: o.rounds, JSON: ro.json, Force: ro.force})
		},
	}
	f := cmd.Flags()
	o.register(f, "write", "randwrite")
	f.StringVar(&o.fioEngine, "fio-engine", "", "the engine .so (default $ZONEFOLD_FIO_ENGINE, else build/fio/zonefold-engine.so)")
	countVar(f, &o.rounds, "rounds", 3, "alternating rounds of each configuration")
	return cmd
}
