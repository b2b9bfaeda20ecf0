package cli

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"

	"github.com/spf13/cobra"

	"github.com/zonefold/zonefold/bench"
	"github.com/zonefold/zonefold/engine"
)

// crashSchedule is the deterministic sequence of writes the crash writer
// makes: op k writes block blockOf(k) of file fileOf(k) with stamp k. A
// crash test recomputes it to know what every fsync made durable.
type crashSchedule struct {
	files, blocks int
	rng           *rand.Rand
}

func newCrashSchedule(seed uint64, files, blocks int) *crashSchedule {
	return &crashSchedule{files: files, blocks: blocks, rng: rand.New(rand.NewPCG(seed, 77))}
}

// next is the file and block of the next op.
func (s *crashSchedule) next() (file, block int) {
	return s.rng.IntN(s.files), s.rng.IntN(s.blocks)
}

// crashBlock is the size of the crash writer's blocks.
const crashBlock = 8192

// crashStamp fills p with op k's content for a file and block.
func crashStamp(p []byte, file, block int, k uint64) {
	for i := 0; i+24 <= len(p); i += 24 {
		binary.LittleEndian.PutUint64(p[i:], uint64(file))
		binary.LittleEndian.PutUint64(p[i+8:], uint64(block))
		binary.LittleEndian.PutUint64(p[i+16:], k)
	}
}

func newDebugCmd() *cobra.Command {
	cmd := groupCmd(&cobra.Command{Use: "debug", Short: "Tools for zonefold's own tests", Hidden: true})
	var seed uint64
	var files, blocks, syncEvery, ops int
	crash := &cobra.Command{
		Use:   "crash-writer DEVICE",
		Short: "Format DEVICE and write a deterministic schedule, printing each op count that fsync made durable",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// 0 of any panicked (rand.IntN(0), a division by zero).
			for _, c := range []struct {
				flag string
				n    int
			}{{"--files", files}, {"--blocks", blocks}, {"--sync-every", syncEvery}} {
				if c.n < 1 {
					return usagef("%s %d: want at least 1", c.flag, c.n)
				}
			}
			e, release, err := bench.OpenFormatted(args[0], engine.Config{CacheBytes: 8 << 20, DirtyLimit: 4 << 20})
			if err != nil {
				return err
			}
			defer release()
			defer e.Close()
			handles := make([]*engine.File, files)
			for i := range handles {
				if handles[i], err = e.Create(fmt.Sprintf("crash.%d", i)); err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			fmt.Fprintln(out, "ready")
			s := newCrashSchedule(seed, files, blocks)
			buf := make([]byte, crashBlock)
			for k := uint64(1); ops == 0 || k <= uint64(ops); k++ {
				f, b := s.next()
				crashStamp(buf, f, b, k)
				if _, err := handles[f].WriteAt(buf, int64(b)*crashBlock); err != nil {
					return err
				}
				if k%uint64(syncEvery) == 0 {
					for _, h := range handles {
						if err := h.Sync(); err != nil {
							return err
						}
					}
					fmt.Fprintf(out, "synced %d\n", k)
				}
			}
			return nil
		},
	}
	f := crash.Flags()
	f.Uint64Var(&seed, "seed", 1, "schedule seed")
	// Counts (no sign): --files -1 panicked in makeslice, --ops -5
	// ran until killed.
	countVar(f, &files, "files", 4, "files")
	countVar(f, &blocks, "blocks", 64, "8 KiB blocks per file")
	countVar(f, &syncEvery, "sync-every", 50, "fsync every file after this many writes")
	countVar(f, &ops, "ops", 0, "stop after this many writes (0: run until killed)")
	cmd.AddCommand(crash)
	return cmd
}
