package bench

import (
	"fmt"
	"math"
	"strings"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/internal/report"
	"github.com/zonefold/zonefold/zns"
)

// checkDeviceFits is checkFits for dev as FormatAndOpen would leave it
// with cfg (engine.FreshLayout): it writes nothing, so a bench refuses a
// workload the device cannot hold before its format erases the device.
func checkDeviceFits(dev zns.Device, cfg engine.Config, w Workload) error {
	l, err := engine.FreshLayout(dev, cfg)
	if err != nil {
		return err
	}
	f, ok := dev.(zns.Forgetful)
	return checkFits(w, l, ok && f.KeepsNoData())
}

// checkFits refuses, as an OptionError, a workload whose files cannot
// fit a freshly formatted device of layout l, whose data zones hold
// l.Capacity bytes, l.Room of them outside GC's reserve: bench run wrote
// until the device was full and failed there, exit 1, with the engine's
// admission internals. null says the device is a null: one, which a
// larger size in its string makes room on.
//
// What fits is what the engine's admission lets in (roomFor, which
// l.Need counts): the writes admitted, the dirty data and what is on the
// device together, with the record headers that carry them and a pad
// block for each zone that may be open, stay within the room appends can
// take outside GC's reserve (on a fresh device, Room). Overwrites take
// no more of it once GC reclaims what they replace, so what counts is
// the file data the workload leaves, not the bytes it writes: each
// file's blocks that any of its writes (or a read run's layout)
// touches, in the engine's blocks. For --rw write, read and randread
// that is all of the file; randwrite draws its offsets with
// replacement, so it is the blocks the draws hit (the same seeded draws
// RunWorkload makes), which may be well under the file's size, or, for
// writes whose draws are not RunWorkload's (fioDraws: fio's), the most
// they can hit. Counting the data alone let a workload within 1-4% of the
// room through to meet ENOSPC near its end, the device formatted.
func checkFits(w Workload, l engine.Layout, null bool) error {
	fix := "lower --size, --files or --scale"
	if null {
		fix += ", or give the null: device a larger size"
	}
	return checkFitsOr(w, l, fix)
}

// checkFitsOr is checkFits whose refusal names fix as what to change.
func checkFitsOr(w Workload, l engine.Layout, fix string) error {
	held, all := w.blocksHeld(l.Room / engine.BlockSize)
	data := held * engine.BlockSize
	need := data
	if data <= l.Room {
		need = l.Need(int64(w.Files), data) + w.overwriteBlocks()*engine.BlockSize
	}
	if need <= l.Room {
		return nil
	}
	total := "more than 8 EiB" // int64(w.Files)*w.Size wrapped: "(-8 EiB)"
	if w.Size <= math.MaxInt64/int64(w.Files) {
		total = report.Exact(int64(w.Files) * w.Size)
	}
	what, verb, them := fmt.Sprintf("%d files x %s (%s)", w.Files, report.Exact(w.Size), total), "need", "them"
	if w.Files == 1 {
		what, verb, them = "1 file of "+report.Exact(w.Size), "needs", "it"
	}
	switch {
	case !all && data > l.Room && w.fioDraws:
		what += fmt.Sprintf(", whose random writes (fio draws their offsets) may land on more than %s of %s,", report.Exact(l.Room), them)
	case !all && data > l.Room:
		what += fmt.Sprintf(", whose random writes land on more than %s of %s,", report.Exact(l.Room), them)
	case !all:
		what += fmt.Sprintf(", whose random writes land on %s of %s,", report.Exact(data), them)
	case w.Size <= l.Room/int64(w.Files) && data > l.Room:
		// A --bs that is not a whole number of blocks: the files'
		// last blocks are whole blocks on the device.
		what += fmt.Sprintf(", %s in the engine's %s blocks,", report.Exact(data), report.Human(engine.BlockSize))
	}
	if data <= l.Room {
		verb += " " + report.Exact(need) + " with the engine's record headers and pads,"
		if w.overwriteBlocks() > 0 {
			// need counts them too: the number was more than the
			// headers and pads explain.
			verb = strings.TrimSuffix(verb, ",") + " and the writes in flight over blocks already written,"
		}
	}
	return badOption(fmt.Errorf("%s %s %s", what, verb, moreThanRoom(l, fix)))
}

// moreThanRoom ends a refusal of files the device of layout l cannot
// hold, naming fix as what to change.
func moreThanRoom(l engine.Layout, fix string) string {
	return fmt.Sprintf("more than the %s the device holds for files (%s of data zones less GC's reserve): %s",
		report.Exact(l.Room), report.Exact(l.Capacity), fix)
}

// checkAllFit is checkFitsOr for the files of several workloads on one
// device (a fio job file's sections, kernelJobWorkloads): their blocks
// held, record headers, pads and overwrites' margins added up.
func checkAllFit(ws []Workload, l engine.Layout, fix string) error {
	if len(ws) == 1 {
		return checkFitsOr(ws[0], l, fix)
	}
	var files, data, over int64
	for _, w := range ws {
		held, _ := w.blocksHeld(l.Room / engine.BlockSize)
		files, data, over = files+int64(w.Files), data+held*engine.BlockSize, over+w.overwriteBlocks()*engine.BlockSize
		if data > l.Room {
			return badOption(fmt.Errorf("the %d files of its %d job sections hold %s", files, len(ws), moreThanRoom(l, fix)))
		}
	}
	if need := l.Need(files, data) + over; need > l.Room {
		with := "the engine's record headers and pads"
		if over > 0 {
			with += " and the writes in flight over blocks already written"
		}
		return badOption(fmt.Errorf("the %d files of its %d job sections hold %s, %s with %s, %s",
			files, len(ws), report.Exact(data), report.Exact(need), with, moreThanRoom(l, fix)))
	}
	return nil
}

// overwriteBlocks is the room a workload that writes blocks already on
// the device takes beside the blocks its files hold: admission takes
// such a write's blocks (a block more where --bs is not a whole number
// of them) while the blocks it replaces are still valid, so each write
// in flight (IODepth per file) may hold its blocks twice. Overwrites are
// randwrite's, --loops' (or --ops past the file), and those of a --bs
// that shares its blocks with the next write. Without it, 1 file of
// 12096 KiB written twice met ENOSPC on its first overwrite where one
// pass fit (TestH46cFitsLimitRunsAndABlockMoreDoesNot).
func (w Workload) overwriteBlocks() int64 {
	blocks := w.Size / int64(w.BS)
	if w.RW != "randwrite" && int64(w.BS)%engine.BlockSize == 0 && (w.RW != "write" || w.opsPerFile() <= blocks) {
		return 0
	}
	return int64(w.Files) * int64(w.IODepth) * (ceilDiv(int64(w.BS), engine.BlockSize) + 1)
}

// maxReplayBytes bounds the memory randwrite's replay (blocksHeld) takes
// to count the blocks its draws hit: a bitmap of a file's blocks (up to
// an 8 TiB file), or a set of the words hit, whose entries (no more than
// the room's blocks) take about replayEntryBytes each, whichever is
// smaller. A replay that would need more is not made: the workload
// runs, and meets ENOSPC if it does not fit. A bitmap of the file's
// blocks made for any size (--size 1P: 32 GiB) ended bench run with the
// runtime out of memory.
const (
	maxReplayBytes   = 256 << 20
	replayEntryBytes = 48
)

// blocksHeld is how many of the engine's blocks the workload's files
// hold at its end (their blocks any write touched), counted up to limit+1
// at most (past limit the workload does not fit, and randwrite's count
// stops there). all says whether every write covers whole files
// (sequential, reads' layouts) rather than random blocks. A randwrite
// whose count would cost more than maxReplayBytes reports 0: it is not
// refused.
func (w Workload) blocksHeld(limit int64) (n int64, all bool) {
	blocks := w.Size / int64(w.BS) // the workload's blocks per file
	perFile := w.opsPerFile()
	if w.RW != "randwrite" {
		written := w.Size // reads lay out all of it
		if w.RW == "write" {
			written = min(perFile, blocks) * int64(w.BS)
		}
		if per := ceilDiv(written, engine.BlockSize); per <= limit/int64(w.Files) {
			return int64(w.Files) * per, true
		}
		// Past limit, where the product may pass int64's range: 16384
		// files of 1 PiB held 2^64 bytes, 0 once wrapped, and fit.
		return limit + 1, true
	}
	fileBlocks := ceilDiv(w.Size, engine.BlockSize)
	if fileBlocks <= limit/int64(w.Files) {
		return int64(w.Files) * fileBlocks, false // whatever the draws hit fits
	}
	// An operation touches at most this many blocks: the draws cannot
	// hit more than all of them.
	perOp := ceilDiv(int64(w.BS), engine.BlockSize) + 1
	if perFile <= limit/(int64(w.Files)*perOp) {
		return int64(w.Files) * perFile * perOp, false
	}
	if w.fioDraws {
		// fio's draws (norandommap, a seed of its own each run) may
		// hit any of the blocks RunWorkload's missed: more than fit.
		return limit + 1, false
	}
	var hits blockSet
	bitmap, words := ceilDiv(fileBlocks, 64)*8, min(limit+1, maxReplayBytes)*replayEntryBytes
	switch {
	case min(bitmap, words) > maxReplayBytes:
		return 0, false
	case bitmap <= words:
		hits = &bitmapSet{bits: make([]uint64, ceilDiv(fileBlocks, 64))}
	default:
		hits = wordSet{}
	}
	for fi := range w.Files {
		hits.clear()
		held := int64(0) // of this file's blocks
		for q := range w.IODepth {
			rng := w.rng(fi, q)
			for op := int64(q); op < perFile && held < fileBlocks; op += int64(w.IODepth) {
				off := rng.Int64N(blocks) * int64(w.BS)
				for b := off / engine.BlockSize; b <= (off+int64(w.BS)-1)/engine.BlockSize; b++ {
					if hits.add(b) {
						held++
						if n++; n > limit {
							return n, false
						}
					}
				}
			}
		}
	}
	return n, false
}

// blockSet is the blocks of a file randwrite's replay has hit.
type blockSet interface {
	add(b int64) bool // reports whether b is new
	clear()
}

// bitmapSet is a bit for each of the file's blocks.
type bitmapSet struct{ bits []uint64 }

func (s *bitmapSet) add(b int64) bool {
	w, bit := &s.bits[b/64], uint64(1)<<(b%64)
	if *w&bit != 0 {
		return false
	}
	*w |= bit
	return true
}

func (s *bitmapSet) clear() { clear(s.bits) }

// wordSet is the 64-block words of the file hit, each with its bits: for
// a file much larger than the room, whose bitmap would be too.
type wordSet map[int64]uint64

func (s wordSet) add(b int64) bool {
	bit := uint64(1) << (b % 64)
	if s[b/64]&bit != 0 {
		return false
	}
	s[b/64] |= bit
	return true
}

func (s wordSet) clear() { clear(s) }

// ceilDiv is a/b rounded up, for a >= 0 and b > 0 (a+b-1 overflowed for
// an a within b of math.MaxInt64: a size= of 8 EiB held no blocks).
func ceilDiv(a, b int64) int64 {
	if a%b != 0 {
		return a/b + 1
	}
	return a / b
}
