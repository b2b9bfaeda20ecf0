package engine

// h27d: h23c's power-cut model driven by rapid (pgregory.net/rapid)
// rather than by a seed. rapid draws the segments, each one's cut point
// (the K-th device operation), tear and operations; the operations run
// through h23c's apply on h23c's model and cutDev, and each segment ends
// with h23c's crash, fsck, reopen and compare. On a failure rapid shrinks
// the draws — fewer segments and operations, smaller offsets, lengths and
// cut points — and prints the shortest failing case it found, every
// operation logged as it ran, and a -rapid.seed / fail file that replays
// it.

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"pgregory.net/rapid"

	"github.com/zonefold/zonefold/internal/rapidcheck"
)

// h27dOp is an operation as rapid draws it, before the model's names and
// sizes are known: resolve turns it into an h23cOp.
type h27dOp struct {
	last  bool // the segment's last operation
	kind  h23cKind
	pick  int // the file: index into the model's sorted names, modulo their number
	fresh int // create, rename: the name f<fresh>, or -1 for an existing one (pick2)
	pick2 int
	mode  int // write: 0 anywhere, 1 whole blocks, 2 append, 3 inside; truncate: 0 down, 1 up
	a, n  int // write: offset and length draws; truncate: size draw
}

var h27dKindNames = [...]string{"create", "write", "truncate", "remove", "rename", "fsync", "sync-all", "gc", "checkpoint"}

// GoString: rapid logs its draws with %#v.
func (o h27dOp) GoString() string {
	last := ""
	if o.last {
		last = ", last"
	}
	return fmt.Sprintf("{%s pick=%d fresh=%d pick2=%d mode=%d a=%d n=%d%s}",
		h27dKindNames[o.kind], o.pick, o.fresh, o.pick2, o.mode, o.a, o.n, last)
}

// h27dOpGen draws operations in h23c's mix (h23cKindOf), one in 64 the
// segment's last; every number shrinks towards 0: the last operation, a
// create, of f0, at offset 0, of 1 byte. The end of the sequence is in
// each operation's draw, not a count drawn ahead, so that rapid's
// shrinker can drop any operation (a draw) and make any one the last.
var h27dOpGen = rapid.Custom(func(t *rapid.T) h27dOp {
	last := rapidcheck.Uniform(t, 64) == 0
	o := h27dOp{last: last, kind: h23cKindOf(rapidcheck.Uniform(t, 100)), fresh: -1}
	switch o.kind {
	case h23cCreate:
		o.fresh = rapid.IntRange(-1, 9).Draw(t, "fresh")
		o.pick = rapid.IntRange(0, 9).Draw(t, "pick")
	case h23cWrite:
		o.pick = rapid.IntRange(0, 9).Draw(t, "pick")
		o.mode = rapid.IntRange(0, 3).Draw(t, "mode")
		switch o.mode {
		case 0:
			o.a = rapid.IntRange(0, 200<<10-1).Draw(t, "off")
			o.n = rapid.IntRange(1, 3*BlockSize+100).Draw(t, "n")
		case 1:
			o.a = rapid.IntRange(0, 47).Draw(t, "block")
			o.n = rapid.IntRange(1, 16).Draw(t, "blocks")
		case 2:
			o.n = rapid.IntRange(1, 8*BlockSize).Draw(t, "n")
		default:
			o.a = rapid.IntRange(0, 1<<20).Draw(t, "off")
			o.n = rapid.IntRange(1, 6*BlockSize).Draw(t, "n")
		}
	case h23cTruncate:
		o.pick = rapid.IntRange(0, 9).Draw(t, "pick")
		o.mode = rapid.IntRange(0, 1).Draw(t, "up")
		o.a = rapid.IntRange(0, 1<<20).Draw(t, "size")
	case h23cRemove, h23cFsync:
		o.pick = rapid.IntRange(0, 9).Draw(t, "pick")
	case h23cRename:
		o.pick = rapid.IntRange(0, 9).Draw(t, "pick")
		o.fresh = rapid.IntRange(-1, 9).Draw(t, "fresh")
		o.pick2 = rapid.IntRange(0, 9).Draw(t, "pick2")
	}
	return o
})

// resolve makes o an operation on r's model; false if it has none (no
// file to work on, a rename onto itself). seq numbers the writes: their
// bytes are a function of it, so that no two writes look alike.
func (o h27dOp) resolve(r *h23cRun, seq *uint64) (h23cOp, bool) {
	names := r.names()
	fresh := func() string { return fmt.Sprintf("f%d", o.fresh) }
	x := h23cOp{kind: o.kind}
	if o.kind == h23cCreate {
		switch {
		case o.fresh >= 0:
			x.name = fresh()
		case len(names) > 0:
			x.name = names[o.pick%len(names)]
		default:
			x.name = fmt.Sprintf("f%d", o.pick)
		}
		return x, true
	}
	switch o.kind {
	case h23cSyncAll, h23cGC, h23cCheckpoint:
		return x, true
	}
	if len(names) == 0 {
		return x, false
	}
	x.name = names[o.pick%len(names)]
	m := r.m[x.name]
	switch o.kind {
	case h23cWrite:
		n := o.n
		switch o.mode {
		case 0:
			x.off = o.a
		case 1:
			x.off, n = o.a*BlockSize, o.n*BlockSize
		case 2:
			x.off = m.size
		default:
			if m.size > 0 {
				x.off = o.a % m.size
			}
		}
		*seq++
		rng := rand.New(rand.NewPCG(*seq, 0x27d))
		x.data = make([]byte, n)
		for i := range x.data {
			x.data[i] = byte(rng.Uint32())
		}
	case h23cTruncate:
		if o.mode == 0 {
			x.size = o.a % (m.size + 1)
		} else {
			x.size = m.size + o.a%(6*BlockSize)
		}
	case h23cRename:
		if o.fresh >= 0 {
			x.to = fresh()
		} else {
			x.to = names[o.pick2%len(names)]
		}
		if x.to == x.name {
			return x, false
		}
	}
	return x, true
}

const h27dMaxSegments, h27dMaxOps = 4, 150

// TestH27dPowerCutProperty: the power-cut model of TestH23cPowerCutModel
// (see h23c_cutmodel_test.go for what it checks after each cut), each
// test case 1-4 segments of about 64 operations (at most 150) on a fresh
// device.
// It does not replace TestH23cPowerCutModel: rapid's cases are short
// histories on a fresh device, where GC seldom relocates anything; h23c's
// seeds run 20 cuts each on one aging device, and GC relocates megabytes.
// -rapid.checks=N runs N cases (default 40, ~3 s; 16 under the race detector,
// which slows each several times), -rapid.seed=S replays one.
func TestH27dPowerCutProperty(t *testing.T) {
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	checks := 40
	if raceEnabled {
		checks = 16
	}
	rapidcheck.Checks(t, checks)
	dir := filepath.Dir(memDevice(t, 1, "256K")[len("emu:"):])
	var cases, segs, nops, cutsInside, gcWritten int64
	rapid.Check(t, func(rt *rapid.T) {
		cases++
		dev := filepath.Join(dir, fmt.Sprintf("dev%d", cases))
		rt.Cleanup(func() {
			matches, _ := filepath.Glob(dev + "*")
			for _, m := range matches {
				os.Remove(m)
			}
		})
		r := newH23cRun(rt, fmt.Sprintf("emu:%s?zone_size=256K&zones=24", dev))
		r.echo = func(op string) { rt.Logf("%s", op) }
		r.open(true)
		rt.Cleanup(func() { r.e.Close() }) // after a crash, Close does nothing
		var seq uint64
		segments := rapid.IntRange(1, h27dMaxSegments).Draw(rt, "segments")
		for s := range segments {
			at := rapid.IntRange(1, h23cCutRange).Draw(rt, "cut")
			tear := rapid.IntRange(0, 4).Draw(rt, "tear") - 1 // -1: no tear
			// The operations are drawn as they run (none after the cut),
			// until one is the last or there are h27dMaxOps.
			segs++
			r.logf("== segment %d: cut at device op %d, tear %d ==", s, at, tear)
			drawn, done := 0, false
			step := func() (before, after h23cModel, err error, more bool) {
				for !done && drawn < h27dMaxOps {
					op := h27dOpGen.Draw(rt, "op")
					drawn++
					nops++
					done = op.last
					o, ok := op.resolve(r, &seq)
					if ok {
						before, after, err = r.apply(o)
						return before, after, err, true
					}
				}
				return nil, nil, nil, false
			}
			if !r.segment(int64(at), tear, step) {
				return // failf has failed rt
			}
		}
		for _, n := range r.cutIn {
			cutsInside += int64(n)
		}
		gcWritten += r.gcWritten
	})
	t.Logf("%d cases, %d segments, %d operations: %d cuts inside an operation, GC relocated %d KiB",
		cases, segs, nops, cutsInside, gcWritten>>10)
	if cutsInside == 0 {
		t.Errorf("no cut landed inside an operation: the test checked only clean shutdowns' worth of cuts")
	}
}
