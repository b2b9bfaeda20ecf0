package cli

import (
	"github.com/spf13/cobra"

	"github.com/zonefold/zonefold/bench"
)

func newBenchFoliosCmd() *cobra.Command {
	o := bench.DefaultFolios
	cmd := &cobra.Command{
		Use:   "folios",
		Short: "Large folios vs 4 KiB folios; one state lock vs two, through the cache",
		Long: `Two cache benchmarks, each comparing two configurations in alternating
rounds within one run:

  large folios: sequential 128 KiB buffered writes through the engine on a
  null: device (appends complete as NOPs; no data is moved), its own
  writeback running alongside, at max order 9 (one 128 KiB folio per write)
  vs max order 0 (32 folios of 4 KiB). Writeback merges a file's
  contiguous dirty folios into records of up to --max-io bytes. Each round
  ends with an fsync of the file. Seed: the bcachefs order hint,
  1.25x-1.5x.

  state lock: 1 KiB writes overwriting a file sequentially (UnixBench
  fstime-w), setting a block's uptodate and dirty bits in one critical
  section vs two. Seed: the iomap series, +8%.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return bench.Folios(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.Duration, "time", o.Duration, "total time per configuration and benchmark")
	countVar(f, &o.Rounds, "rounds", o.Rounds, "alternating rounds the time is split into")
	sizeVar(f, &o.CacheSize, "cache-size", o.CacheSize, "cache size for the large-folio benchmark (e.g. 256M)")
	intSizeVar(f, &o.WriteSize, "bs", o.WriteSize, "write size of the large-folio benchmark")
	intSizeVar(f, &o.SmallSize, "small-bs", o.SmallSize, "write size of the state-lock benchmark")
	sizeVar(f, &o.SmallFile, "small-file", o.SmallFile, "file size the state-lock benchmark overwrites")
	intSizeVar(f, &o.BlockSize, "block-size", o.BlockSize, "cache block size of the state-lock benchmark")
	sizeVar(f, &o.MaxIO, "max-io", o.MaxIO, "largest writeback append (a record: header and data)")
	f.BoolVar(&o.JSON, "json", false, "print one JSON object instead of a table")
	return cmd
}
