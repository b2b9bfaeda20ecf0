package bench

import (
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/uring"
)

// BatchingOptions configure bench batching.
type BatchingOptions struct {
	QD       int           // operations in flight per round
	BS       int           // write size for the file target
	Duration time.Duration // total time per configuration and target
	Rounds   int           // alternating rounds the time is split into
	Dir      string        // folder for the file target's scratch file
	FileSize int64         // size of the scratch file
	JSON     bool          // one JSON object instead of a table
}

// batchingPair is one target measured plugged and unplugged.
type batchingPair struct {
	Target    string
	Plugged   BatchResult
	Unplugged BatchResult
}

func (p batchingPair) ratio() float64 {
	if p.Unplugged.IOPS() == 0 {
		return 0
	}
	return p.Plugged.IOPS() / p.Unplugged.IOPS()
}

// Batching runs 4 KiB operations at queue depth QD, once plugged (all SQEs
// of a round enter the kernel together) and once unplugged (one
// io_uring_enter per I/O), on NOP operations and on O_DIRECT writes to a
// real file, alternating in rounds, and prints both and their ratio. Seed:
// the aio "implement request batching" series (2x at 4k O_DIRECT QD128).
func Batching(out io.Writer, o BatchingOptions) error {
	nopPair, filePair, direct, err := measureBatching(o)
	if err != nil {
		return err
	}
	return printBatching(out, o, direct, nopPair, filePair)
}

func (o BatchingOptions) validate() error {
	switch {
	case o.QD < 1 || o.QD > 4096:
		return fmt.Errorf("--qd %d: want 1..4096", o.QD)
	case o.BS < 512 || o.BS%512 != 0:
		return fmt.Errorf("--bs %s: want a multiple of 512 B", given(int64(o.BS)))
	case o.Rounds < 1 || o.Duration <= 0:
		return fmt.Errorf("--rounds %d, --time %v: want both more than 0", o.Rounds, o.Duration)
	case o.FileSize < int64(o.BS):
		return fmt.Errorf("--file-size %d is smaller than --bs %d", o.FileSize, o.BS)
	}
	return nil
}

// measureBatching runs both targets, plugged and unplugged; direct says
// whether the file target had O_DIRECT.
func measureBatching(o BatchingOptions) (nopPair, filePair batchingPair, direct bool, err error) {
	if err := o.validate(); err != nil {
		return nopPair, filePair, false, badOption(err)
	}
	ring, err := uring.New(uring.Options{Entries: uint32(max(o.QD, 8))})
	if err != nil {
		return nopPair, filePair, false, err
	}
	defer ring.Close()

	nop := func(_ int64, c uring.Completion) error { return ring.Nop(c) }
	if nopPair, err = alternate(ring, "nop", o, nop); err != nil {
		return nopPair, filePair, false, err
	}

	file, direct, cleanup, err := scratchFile(o.Dir, o.FileSize)
	if err != nil {
		return nopPair, filePair, false, err
	}
	defer cleanup()
	buf, err := unix.Mmap(-1, 0, o.BS, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nopPair, filePair, false, fmt.Errorf("map write buffer: %w", err)
	}
	defer unix.Munmap(buf)
	blocks := o.FileSize / int64(o.BS)
	fd := uring.FD(int(file.Fd()))
	write := func(i int64, c uring.Completion) error {
		return ring.Write(fd, buf, uint64((i%blocks)*int64(o.BS)), c)
	}
	filePair, err = alternate(ring, "file", o, write)
	return nopPair, filePair, direct, err
}

// alternate runs plugged and unplugged rounds in turn and sums each side.
func alternate(ring *uring.Ring, target string, o BatchingOptions, submit func(int64, uring.Completion) error) (batchingPair, error) {
	p := batchingPair{Target: target}
	per := o.Duration / time.Duration(o.Rounds)
	for range o.Rounds {
		for _, plugged := range []bool{true, false} {
			res, err := RunBatches(ring, o.QD, plugged, per, submit)
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

func printBatching(out io.Writer, o BatchingOptions, direct bool, nop, file batchingPair) error {
	if o.JSON {
		return WriteJSON(out, batchingJSON{
			QD: o.QD, BS: o.BS, FileDirect: direct,
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
	fmt.Fprintf(out, "batching: QD%d, file writes of %s %s, %d alternating rounds\n\n", o.QD, given(int64(o.BS)), mode, o.Rounds)
	tw := newTable(out)
	fmt.Fprintln(tw, "target\tplugged IOPS\tSQEs/enter\tunplugged IOPS\tSQEs/enter\tratio\t")
	for _, p := range []batchingPair{nop, file} {
		fmt.Fprintf(tw, "%s\t%.0f\t%.1f\t%.0f\t%.1f\t%.2fx\t\n", p.Target,
			p.Plugged.IOPS(), p.Plugged.Stats.SQEsPerEnter(),
			p.Unplugged.IOPS(), p.Unplugged.Stats.SQEsPerEnter(), p.ratio())
	}
	return tw.Flush()
}
