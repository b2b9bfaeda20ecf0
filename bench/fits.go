package bench

import (
	"fmt"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/internal/report"
)

// checkFits refuses, as an OptionError, a workload whose files cannot
// fit the device e (freshly formatted): bench run wrote until the device
// was full and failed there, exit 1, with the engine's admission
// internals.
//
// What fits is what the engine's admission lets in (roomFor): the
// writes admitted, the dirty data and the data on the device together
// stay within the room appends can take outside GC's reserve, which on a
// fresh device is Available (the data zones less GC's reserve zones).
// Overwrites take no more of it once GC reclaims what they replace, so
// what counts is the file data the workload leaves, not the bytes it
// writes: each file's blocks that any of its writes (or a read run's
// layout) touches, in the engine's blocks. For --rw write, read and
// randread that is all of the file; randwrite draws its offsets with
// replacement, so it is the blocks the draws hit (the same seeded draws
// RunWorkload makes), which may be well under the file's size.
//
// The refusal is exact for the data alone: record headers (a block per
// record) and pads take a little more, so a workload just under the
// room may still meet ENOSPC as it runs; none refused here could run.
func checkFits(e *engine.Engine, w Workload) error {
	room := e.Available()
	need, all := w.blocksHeld(room / engine.BlockSize)
	if need*engine.BlockSize <= room {
		return nil
	}
	what, verb, them := fmt.Sprintf("%d files x %s (%s)", w.Files, report.Exact(w.Size), report.Exact(int64(w.Files)*w.Size)), "need", "them"
	if w.Files == 1 {
		what, verb, them = "1 file of "+report.Exact(w.Size), "needs", "it"
	}
	switch {
	case !all:
		what += fmt.Sprintf(", whose random writes land on more than %s of %s,", report.Exact(room), them)
	case int64(w.Files)*w.Size <= room:
		// A --bs that is not a whole number of blocks: the files'
		// last blocks are whole blocks on the device.
		what += fmt.Sprintf(", %s in the engine's %s blocks,", report.Exact(need*engine.BlockSize), report.Human(engine.BlockSize))
	}
	return badOption(fmt.Errorf("%s %s more than the %s the device holds for files (%s of data zones less GC's reserve): lower --size, --files or --scale",
		what, verb, report.Exact(room), report.Exact(e.Capacity())))
}

// blocksHeld is how many of the engine's blocks the workload's files
// hold at its end (their blocks any write touched), counted up to limit+1
// at most (past limit the workload does not fit, and randwrite's count
// stops there). all says whether every write covers whole files
// (sequential, reads' layouts) rather than random blocks.
func (w Workload) blocksHeld(limit int64) (n int64, all bool) {
	blocks := w.Size / int64(w.BS) // the workload's blocks per file
	perFile := w.opsPerFile()
	if w.RW != "randwrite" {
		written := w.Size // reads lay out all of it
		if w.RW == "write" {
			written = min(perFile, blocks) * int64(w.BS)
		}
		return int64(w.Files) * ceilDiv(written, engine.BlockSize), true
	}
	fileBlocks := ceilDiv(w.Size, engine.BlockSize)
	if int64(w.Files)*fileBlocks <= limit {
		return int64(w.Files) * fileBlocks, false // whatever the draws hit fits
	}
	hit := make([]uint64, ceilDiv(fileBlocks, 64))
	for fi := range w.Files {
		clear(hit)
		for q := range w.IODepth {
			rng := w.rng(fi, q)
			for op := int64(q); op < perFile; op += int64(w.IODepth) {
				off := rng.Int64N(blocks) * int64(w.BS)
				for b := off / engine.BlockSize; b <= (off+int64(w.BS)-1)/engine.BlockSize; b++ {
					if hit[b/64]&(1<<(b%64)) == 0 {
						hit[b/64] |= 1 << (b % 64)
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

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
