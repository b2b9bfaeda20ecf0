package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/uring"
)

type batchingOpts struct {
	qd       int
	bs       int
	duration time.Duration
	rounds   int
	dir      string
	fileSize int64
	json     bool
}

// batchingPair is one target measured plugged and unplugged.
type batchingPair struct {
	Target    string
	Plugged   uring.BatchResult
	Unplugged uring.BatchResult
}

func (p batchingPair) ratio() float64 {
	if p.Unplugged.IOPS() == 0 {
		return 0
	}
	return p.Plugged.IOPS() / p.Unplugged.IOPS()
}

func newBenchBatchingCmd() *cobra.Command {
	var o batchingOpts
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
			return runBenchBatching(cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.qd, "qd", 128, "operations in flight per round")
	f.IntVar(&o.bs, "bs", 4096, "write size in bytes for the file target")
	f.DurationVar(&o.duration, "time", 2*time.Second, "total time per configuration and target")
	f.IntVar(&o.rounds, "rounds", 8, "alternating rounds the time is split into")
	f.StringVar(&o.dir, "dir", os.TempDir(), "folder for the file target's scratch file")
	f.Int64Var(&o.fileSize, "file-size", 64<<20, "size of the scratch file in bytes")
	f.BoolVar(&o.json, "json", false, "print one JSON object instead of a table")
	return cmd
}

func runBenchBatching(out io.Writer, o batchingOpts) error {
	nopPair, filePair, direct, err := measureBatching(o)
	if err != nil {
		return err
	}
	return printBatching(out, o, direct, nopPair, filePair)
}

// measureBatching runs both targets, plugged and unplugged; direct says
// whether the file target had O_DIRECT.
func measureBatching(o batchingOpts) (nopPair, filePair batchingPair, direct bool, err error) {
	if o.qd < 1 || o.qd > 4096 {
		return nopPair, filePair, false, fmt.Errorf("--qd %d: want 1..4096", o.qd)
	}
	if o.bs < 512 || o.bs%512 != 0 {
		return nopPair, filePair, false, fmt.Errorf("--bs %d: want a multiple of 512", o.bs)
	}
	if o.rounds < 1 || o.duration <= 0 {
		return nopPair, filePair, false, errors.New("--rounds and --time must be positive")
	}
	if o.fileSize < int64(o.bs) {
		return nopPair, filePair, false, fmt.Errorf("--file-size %d is smaller than --bs %d", o.fileSize, o.bs)
	}
	ring, err := uring.New(uring.Options{Entries: uint32(max(o.qd, 8))})
	if err != nil {
		return nopPair, filePair, false, err
	}
	defer ring.Close()

	nop := func(_ int64, c uring.Completion) error { return ring.Nop(c) }
	if nopPair, err = alternate(ring, "nop", o, nop); err != nil {
		return nopPair, filePair, false, err
	}

	file, direct, cleanup, err := scratchFile(o.dir, o.fileSize)
	if err != nil {
		return nopPair, filePair, false, err
	}
	defer cleanup()
	buf, err := unix.Mmap(-1, 0, o.bs, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nopPair, filePair, false, fmt.Errorf("map write buffer: %w", err)
	}
	defer unix.Munmap(buf)
	blocks := o.fileSize / int64(o.bs)
	fd := uring.FD(int(file.Fd()))
	write := func(i int64, c uring.Completion) error {
		return ring.Write(fd, buf, uint64((i%blocks)*int64(o.bs)), c)
	}
	filePair, err = alternate(ring, "file", o, write)
	return nopPair, filePair, direct, err
}

// alternate runs plugged and unplugged rounds in turn and sums each side.
func alternate(ring *uring.Ring, target string, o batchingOpts, submit func(int64, uring.Completion) error) (batchingPair, error) {
	p := batchingPair{Target: target}
	per := o.duration / time.Duration(o.rounds)
	for range o.rounds {
		for _, plugged := range []bool{true, false} {
			res, err := uring.RunBatches(ring, o.qd, plugged, per, submit)
			if err != nil {
				return p, fmt.Errorf("%s: %w", target, err)
			}
			if plugged {
				p.Plugged.Add(res)
			} else {
				p.Unplugged.Add(res)
			}
		}
	}
	return p, nil
}

// scratchFile makes a fully written file so that the benchmark's writes
// overwrite allocated blocks, with O_DIRECT where the file system has it.
func scratchFile(dir string, size int64) (*os.File, bool, func(), error) {
	f, err := os.CreateTemp(dir, "zonefold-batching-*")
	if err != nil {
		return nil, false, nil, fmt.Errorf("scratch file: %w", err)
	}
	name := f.Name()
	cleanup := func() { f.Close(); os.Remove(name) }
	chunk := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(chunk)) {
		n := min(int64(len(chunk)), size-off)
		if _, err := f.WriteAt(chunk[:n], off); err != nil {
			cleanup()
			return nil, false, nil, fmt.Errorf("fill scratch file: %w", err)
		}
	}
	if err := f.Sync(); err != nil {
		cleanup()
		return nil, false, nil, fmt.Errorf("sync scratch file: %w", err)
	}
	df, err := os.OpenFile(name, os.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		// tmpfs and some others have no O_DIRECT: measure buffered writes.
		return f, false, cleanup, nil
	}
	f.Close()
	return df, true, func() { df.Close(); os.Remove(name) }, nil
}

type batchingJSON struct {
	QD                     int     `json:"qd"`
	BS                     int     `json:"bs"`
	FileDirect             bool    `json:"file_direct"`
	NopRatio               float64 `json:"nop_ratio"`
	NopPluggedIOPS         float64 `json:"nop_plugged_iops"`
	NopUnpluggedIOPS       float64 `json:"nop_unplugged_iops"`
	NopPluggedSQEsPerEnter float64 `json:"nop_plugged_sqes_per_enter"`
	NopUnpluggedSQEsPer    float64 `json:"nop_unplugged_sqes_per_enter"`
	FileRatio              float64 `json:"file_ratio"`
	FilePluggedIOPS        float64 `json:"file_plugged_iops"`
	FileUnpluggedIOPS      float64 `json:"file_unplugged_iops"`
	FilePluggedSQEsPer     float64 `json:"file_plugged_sqes_per_enter"`
	FileUnpluggedSQEsPer   float64 `json:"file_unplugged_sqes_per_enter"`
}

func printBatching(out io.Writer, o batchingOpts, direct bool, nop, file batchingPair) error {
	if o.json {
		return writeJSON(out, batchingJSON{
			QD: o.qd, BS: o.bs, FileDirect: direct,
			NopRatio: nop.ratio(), NopPluggedIOPS: nop.Plugged.IOPS(), NopUnpluggedIOPS: nop.Unplugged.IOPS(),
			NopPluggedSQEsPerEnter: nop.Plugged.Stats.SQEsPerEnter(), NopUnpluggedSQEsPer: nop.Unplugged.Stats.SQEsPerEnter(),
			FileRatio: file.ratio(), FilePluggedIOPS: file.Plugged.IOPS(), FileUnpluggedIOPS: file.Unplugged.IOPS(),
			FilePluggedSQEsPer: file.Plugged.Stats.SQEsPerEnter(), FileUnpluggedSQEsPer: file.Unplugged.Stats.SQEsPerEnter(),
		})
	}
	mode := "O_DIRECT"
	if !direct {
		mode = "buffered (no O_DIRECT here)"
	}
	fmt.Fprintf(out, "batching: QD%d, file writes %d B %s, %d alternating rounds\n\n", o.qd, o.bs, mode, o.rounds)
	tw := newTable(out)
	fmt.Fprintln(tw, "target\tplugged IOPS\tSQEs/enter\tunplugged IOPS\tSQEs/enter\tratio\t")
	for _, p := range []batchingPair{nop, file} {
		fmt.Fprintf(tw, "%s\t%.0f\t%.1f\t%.0f\t%.1f\t%.2fx\t\n", p.Target,
			p.Plugged.IOPS(), p.Plugged.Stats.SQEsPerEnter(),
			p.Unplugged.IOPS(), p.Unplugged.Stats.SQEsPerEnter(), p.ratio())
	}
	return tw.Flush()
}
