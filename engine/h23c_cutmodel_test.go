package engine

// h23c: a sequential, seeded power-cut model. One client runs random
// operations (writes and overwrites at random offsets, truncates down and
// up, create over an existing name, rename over an existing file, remove,
// fsync, Engine.Sync, forced GC passes, checkpoints) on a device small
// enough that GC relocates live data all the time. The power is cut at
// the K-th device operation (append, write, flush, reset, finish, read)
// counted from the start of the segment: from then on the device refuses
// everything (cutDev), so the cut can land inside a GC relocation, a
// checkpoint or an fsync. The engine is then crashed, the last write
// possibly torn, the device power-cut, fsck run, the engine reopened and
// its state compared with the model:
//
//   - fsync/Sync-acknowledged bytes and size survive;
//   - a namespace operation that returned nil is durable;
//   - an unsynced block reads as its durable content or as the content
//     it had after one of the writes since (whole 4 KiB blocks of some
//     write), never anything else; the size is one it had since the last
//     durable point.
//
// The operation during which the cut came (it may have failed, or
// succeeded) may or may not have taken effect: the state must match the
// model with it or without it.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/zonefold/zonefold/uring"
	"github.com/zonefold/zonefold/zns"
)

var errH23cCut = errors.New("h23c: power cut")

// cutDev counts device operations and, from the at-th on, refuses every
// one: the power is gone.
type cutDev struct {
	*zns.Emu
	n, at  atomic.Int64
	cut    atomic.Bool
	mu     sync.Mutex
	onCut  func() // called once, at the cut
	events []string
}

func (d *cutDev) tick(what string) bool {
	if d.cut.Load() {
		return true
	}
	n := d.n.Add(1)
	if at := d.at.Load(); at > 0 && n >= at {
		if d.cut.CompareAndSwap(false, true) {
			d.mu.Lock()
			d.events = append(d.events, fmt.Sprintf("cut at #%d: %s", n, what))
			d.mu.Unlock()
		}
		return true
	}
	return false
}

func (d *cutDev) Append(zone int, bufs [][]byte, c zns.AppendCompletion) error {
	if d.tick("append z" + strconv.Itoa(zone)) {
		return errH23cCut
	}
	return d.Emu.Append(zone, bufs, c)
}

// AppendSums is the client records' append (the emulator checksums
// them itself, zns.SumAppender): cut like Append. Promoted from the Emu
// uncut, client appends went on landing after the cut (lost all the same
// at the power cut, but no cut ever came at one).
func (d *cutDev) AppendSums(zone int, bufs [][]byte, sums []uint32, c zns.AppendCompletion) error {
	if d.tick("append z" + strconv.Itoa(zone)) {
		return errH23cCut
	}
	return d.Emu.AppendSums(zone, bufs, sums, c)
}

func (d *cutDev) Write(zone int, off int64, bufs [][]byte, c uring.Completion) error {
	if d.tick("write z" + strconv.Itoa(zone)) {
		return errH23cCut
	}
	return d.Emu.Write(zone, off, bufs, c)
}

func (d *cutDev) Flush() error {
	if d.tick("flush") {
		return errH23cCut
	}
	return d.Emu.Flush()
}

func (d *cutDev) FlushCut(cut func()) error {
	if d.tick("flush") {
		return errH23cCut
	}
	return d.Emu.FlushCut(cut)
}

func (d *cutDev) ResetZone(zone int) error {
	if d.tick("reset z" + strconv.Itoa(zone)) {
		return errH23cCut
	}
	return d.Emu.ResetZone(zone)
}

func (d *cutDev) FinishZone(zone int) error {
	if d.tick("finish z" + strconv.Itoa(zone)) {
		return errH23cCut
	}
	return d.Emu.FinishZone(zone)
}

func (d *cutDev) OpenZone(zone int) error {
	if d.tick("open z" + strconv.Itoa(zone)) {
		return errH23cCut
	}
	return d.Emu.OpenZone(zone)
}

func (d *cutDev) CloseZone(zone int) error {
	if d.tick("close z" + strconv.Itoa(zone)) {
		return errH23cCut
	}
	return d.Emu.CloseZone(zone)
}

func (d *cutDev) Read(off int64, buf []byte, c uring.Completion) error {
	if d.cut.Load() {
		return errH23cCut
	}
	return d.Emu.Read(off, buf, c)
}

// h23cFile is the model of one file: the sizes it may have after a
// crash, and for each block the contents it may hold.
type h23cFile struct {
	size  int          // current size
	sizes map[int]bool // sizes a crash may leave
	cur   [][]byte     // current content per block (zero-padded)
	cands [][][]byte   // per block: contents a crash may leave
}

func (m *h23cFile) clone() *h23cFile {
	c := &h23cFile{size: m.size, sizes: map[int]bool{}}
	for s := range m.sizes {
		c.sizes[s] = true
	}
	for _, b := range m.cur {
		c.cur = append(c.cur, slices.Clone(b))
	}
	for _, cs := range m.cands {
		var n [][]byte
		for _, b := range cs {
			n = append(n, slices.Clone(b))
		}
		c.cands = append(c.cands, n)
	}
	return c
}

func newH23cFile() *h23cFile { return &h23cFile{sizes: map[int]bool{0: true}} }

func (m *h23cFile) grow(nblocks int) {
	for len(m.cur) < nblocks {
		m.cur = append(m.cur, make([]byte, BlockSize))
		m.cands = append(m.cands, [][]byte{make([]byte, BlockSize)})
	}
}

func addCand(cs [][]byte, b []byte) [][]byte {
	for _, c := range cs {
		if bytes.Equal(c, b) {
			return cs
		}
	}
	return append(cs, slices.Clone(b))
}

func (m *h23cFile) write(p []byte, off int) {
	end := off + len(p)
	m.grow((end + BlockSize - 1) / BlockSize)
	for i := range p {
		o := off + i
		m.cur[o/BlockSize][o%BlockSize] = p[i]
	}
	for b := off / BlockSize; b*BlockSize < end; b++ {
		m.cands[b] = addCand(m.cands[b], m.cur[b])
	}
	if end > m.size {
		m.size = end
		m.sizes[end] = true
	}
}

// durable: fsync or Sync acknowledged.
func (m *h23cFile) durable() {
	m.sizes = map[int]bool{m.size: true}
	for b := range m.cur {
		m.cands[b] = [][]byte{slices.Clone(m.cur[b])}
	}
}

// truncate is durable when it returns (size); blocks past it go.
func (m *h23cFile) truncate(s int) {
	nb := (s + BlockSize - 1) / BlockSize
	m.grow(nb)
	if nb < len(m.cur) {
		m.cur, m.cands = m.cur[:nb], m.cands[:nb]
	}
	if s%BlockSize != 0 && nb > 0 {
		clear(m.cur[nb-1][s%BlockSize:])
		var n [][]byte
		for _, c := range m.cands[nb-1] {
			c = slices.Clone(c)
			clear(c[s%BlockSize:])
			n = addCand(n, c)
		}
		m.cands[nb-1] = n
	}
	m.size = s
	m.sizes = map[int]bool{s: true}
}

type h23cModel map[string]*h23cFile

func (mm h23cModel) clone() h23cModel {
	c := h23cModel{}
	for n, f := range mm {
		c[n] = f.clone()
	}
	return c
}

type h23cRun struct {
	t       rapid.TB // a *testing.T, or the *rapid.T of TestH27dPowerCutProperty
	rng     *rand.Rand
	devName string
	cfg     Config
	e       *Engine
	dev     *cutDev
	m       h23cModel
	trace   []string
	nameSeq int
	lastOp  string
	// echo, if set, gets every operation as it is logged (rapid's Logf,
	// which prints the shrunk failing sequence in full); failf then
	// leaves the trace out.
	echo func(string)
	// cutEvents: the segment's cut, kept past the reopen (which brings
	// a new cutDev) for failf.
	cutEvents []string
	// statistics: cuts inside an operation, by operation; GC bytes relocated
	cutIn              map[string]int
	gcWritten, gcReset int64
}

func newH23cRun(t rapid.TB, devName string) *h23cRun {
	return &h23cRun{t: t, devName: devName,
		cfg: Config{CacheBytes: 2 << 20, DirtyLimit: 512 << 10, MaxOrder: 4},
		m:   h23cModel{}, cutIn: map[string]int{}}
}

func (r *h23cRun) logf(format string, args ...any) {
	r.lastOp = fmt.Sprintf(format, args...)
	r.trace = append(r.trace, r.lastOp)
	if r.echo != nil {
		r.echo(r.lastOp)
	}
}

func (r *h23cRun) open(fresh bool) {
	emu, err := zns.Open(r.devName, zns.Options{})
	if err != nil {
		r.t.Fatal(err)
	}
	if fresh {
		if _, err := Format(emu, FormatOptions{}); err != nil {
			r.t.Fatal(err)
		}
	}
	r.dev = &cutDev{Emu: emu.(*zns.Emu)}
	e, err := OpenDevice(r.dev, r.cfg)
	if err != nil {
		r.failf("reopen: %v", err)
		r.t.FailNow()
	}
	r.e = e
}

func (r *h23cRun) failf(format string, args ...any) {
	r.t.Helper()
	tr := r.trace
	if len(tr) > 60 {
		tr = tr[len(tr)-60:]
	}
	if r.echo != nil {
		tr = []string{"(logged above)"}
	}
	ev := r.cutEvents
	if ev == nil {
		r.dev.mu.Lock()
		ev = slices.Clone(r.dev.events)
		r.dev.mu.Unlock()
	}
	r.t.Errorf("%s\ncut: %v\nlast operations:\n  %s", fmt.Sprintf(format, args...), ev, joinLines(tr))
}

func (r *h23cRun) names() []string {
	var out []string
	for n := range r.m {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func (r *h23cRun) pick() string {
	ns := r.names()
	if len(ns) == 0 {
		return ""
	}
	return ns[r.rng.IntN(len(ns))]
}

// h23cKind is an operation of the model.
type h23cKind int

const (
	h23cCreate h23cKind = iota
	h23cWrite
	h23cTruncate
	h23cRemove
	h23cRename
	h23cFsync
	h23cSyncAll
	h23cGC
	h23cCheckpoint
)

// h23cKindOf maps v in [0, 100) to a kind: the model's mix of operations.
func h23cKindOf(v int) h23cKind {
	switch {
	case v < 6:
		return h23cCreate
	case v < 50:
		return h23cWrite
	case v < 60:
		return h23cTruncate
	case v < 65:
		return h23cRemove
	case v < 72:
		return h23cRename
	case v < 84:
		return h23cFsync
	case v < 88:
		return h23cSyncAll
	case v < 94:
		return h23cGC
	default:
		return h23cCheckpoint
	}
}

// h23cOp is one operation, its names and numbers resolved against the
// model: name exists unless kind is h23cCreate.
type h23cOp struct {
	kind     h23cKind
	name, to string // to: the rename's target
	off      int    // write: offset
	size     int    // truncate: new size
	data     []byte // write
}

// randomOp draws the next operation from r.rng; false if it is a no-op
// (a rename onto itself).
func (r *h23cRun) randomOp() (h23cOp, bool) {
	v := r.rng.IntN(100)
	name := r.pick()
	if name == "" || len(r.m) < 3 {
		v = 0
	}
	o := h23cOp{kind: h23cKindOf(v), name: name}
	switch o.kind {
	case h23cCreate:
		if name == "" || len(r.m) < 8 && r.rng.IntN(2) == 0 {
			r.nameSeq++
			o.name = fmt.Sprintf("f%d", r.nameSeq%10)
		}
	case h23cWrite:
		var n int
		switch r.rng.IntN(4) {
		case 0:
			o.off = r.rng.IntN(200 << 10)
			n = 1 + r.rng.IntN(3*BlockSize+100)
		case 1:
			o.off = r.rng.IntN(48) * BlockSize
			n = (1 + r.rng.IntN(16)) * BlockSize
		case 2: // append
			o.off = r.m[name].size
			n = 1 + r.rng.IntN(8*BlockSize)
		default: // overwrite inside
			if s := r.m[name].size; s > 0 {
				o.off = r.rng.IntN(s)
			}
			n = 1 + r.rng.IntN(6*BlockSize)
		}
		o.data = make([]byte, n)
		for i := range o.data {
			o.data[i] = byte(r.rng.Uint32())
		}
	case h23cTruncate:
		m := r.m[name]
		if r.rng.IntN(2) == 0 {
			o.size = r.rng.IntN(m.size + 1)
		} else {
			o.size = m.size + r.rng.IntN(6*BlockSize)
		}
	case h23cRename:
		o.to = r.pick()
		if o.to == name || r.rng.IntN(3) == 0 {
			r.nameSeq++
			o.to = fmt.Sprintf("f%d", r.nameSeq%10)
		}
		if o.to == name {
			return o, false
		}
	}
	return o, true
}

// step runs one random operation. It returns the model without the
// operation's effect, the model with it, and the operation's error.
func (r *h23cRun) step() (before, after h23cModel, err error) {
	o, ok := r.randomOp()
	if !ok {
		return r.m.clone(), r.m.clone(), nil
	}
	return r.apply(o)
}

// apply runs o on the engine and the model. It returns the model without
// the operation's effect, the model with it, and the operation's error.
func (r *h23cRun) apply(o h23cOp) (before, after h23cModel, err error) {
	before = r.m.clone()
	e := r.e
	name := o.name
	switch o.kind {
	case h23cCreate:
		r.logf("create %s", name)
		var h *File
		h, err = e.Create(name)
		if err == nil {
			h.Close()
		}
		r.m[name] = newH23cFile()
	case h23cWrite:
		r.logf("write %s at %d, %d bytes", name, o.off, len(o.data))
		var h *File
		if h, err = e.Open(name); err == nil {
			_, err = h.WriteAt(o.data, int64(o.off))
			h.Close()
		}
		r.m[name].write(o.data, o.off)
	case h23cTruncate:
		m := r.m[name]
		r.logf("truncate %s %d -> %d", name, m.size, o.size)
		var h *File
		if h, err = e.Open(name); err == nil {
			err = h.Truncate(int64(o.size))
			h.Close()
		}
		m.truncate(o.size)
	case h23cRemove:
		r.logf("remove %s", name)
		err = e.Remove(name)
		delete(r.m, name)
	case h23cRename:
		r.logf("rename %s -> %s (exists %v)", name, o.to, r.m[o.to] != nil)
		err = e.Rename(name, o.to)
		r.m[o.to] = r.m[name]
		delete(r.m, name)
	case h23cFsync:
		r.logf("fsync %s", name)
		var h *File
		if h, err = e.Open(name); err == nil {
			err = h.Sync()
			h.Close()
		}
		if err == nil {
			r.m[name].durable()
		}
	case h23cSyncAll:
		r.logf("sync all")
		err = e.Sync(context.Background())
		if err == nil {
			for _, m := range r.m {
				m.durable()
			}
		}
	case h23cGC:
		r.logf("gc pass")
		_, err = e.gc.pass(gcUrgent)
		if err != nil && !r.dev.cut.Load() {
			err = nil // a pass may find nothing worth doing
		}
	default:
		r.logf("checkpoint")
		err = e.checkpoint()
	}
	return before, r.m.clone(), err
}

// verify compares the engine with the model; it returns the problems.
func (r *h23cRun) verify(m h23cModel) []string {
	var probs []string
	list := r.e.List()
	have := map[string]FileInfo{}
	for _, fi := range list {
		have[fi.Name] = fi
		if m[fi.Name] == nil {
			probs = append(probs, fmt.Sprintf("%s exists (size %d), model has no such file", fi.Name, fi.Size))
		}
	}
	for name, mf := range m {
		fi, ok := have[name]
		if !ok {
			probs = append(probs, fmt.Sprintf("%s is gone", name))
			continue
		}
		if !mf.sizes[int(fi.Size)] {
			probs = append(probs, fmt.Sprintf("%s: size %d, model allows %v", name, fi.Size, mapKeys(mf.sizes)))
			continue
		}
		h, err := r.e.Open(name)
		if err != nil {
			probs = append(probs, fmt.Sprintf("open %s: %v", name, err))
			continue
		}
		got := make([]byte, fi.Size)
		n, err := h.ReadAt(got, 0)
		h.Close()
		if int64(n) != fi.Size || err != nil && err != io.EOF {
			probs = append(probs, fmt.Sprintf("read %s: %d of %d, %v", name, n, fi.Size, err))
			continue
		}
		for b := 0; b*BlockSize < len(got); b++ {
			blk := got[b*BlockSize : min(len(got), (b+1)*BlockSize)]
			ok := false
			if b < len(mf.cands) {
				for _, c := range mf.cands[b] {
					if bytes.Equal(c[:len(blk)], blk) {
						ok = true
						break
					}
				}
			}
			if !ok {
				probs = append(probs, fmt.Sprintf("%s block %d (size %d): content matches none of %d allowed (first bytes %x)",
					name, b, fi.Size, len(mf.cands[min(b, len(mf.cands)-1)]), blk[:min(8, len(blk))]))
				break
			}
		}
	}
	slices.Sort(probs)
	return probs
}

func mapKeys(m map[int]bool) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	return out
}

// adopt makes the model what the engine holds now, all of it durable.
func (r *h23cRun) adopt() {
	m := h23cModel{}
	for _, fi := range r.e.List() {
		h, err := r.e.Open(fi.Name)
		if err != nil {
			r.t.Fatal(err)
		}
		got := make([]byte, fi.Size)
		h.ReadAt(got, 0)
		h.Close()
		f := newH23cFile()
		f.write(got, 0)
		f.durable()
		m[fi.Name] = f
	}
	r.m = m
}

// segment runs operations (step's, until it reports no more) until the
// cut at the at-th device operation, then crashes (tearing the last
// write to tear blocks if tear >= 0), recovers and checks. It reports
// false if a check failed.
func (r *h23cRun) segment(at int64, tear int, step func() (before, after h23cModel, err error, more bool)) bool {
	r.dev.n.Store(0)
	r.dev.at.Store(at)
	r.cutEvents = nil
	var before, after h23cModel
	var err error
	for !r.dev.cut.Load() {
		b, a, e, more := step()
		if !more {
			break
		}
		before, after, err = b, a, e
		if err != nil && !r.dev.cut.Load() {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			r.failf("unexpected error before the cut: %v", err)
			return false
		}
		if err == nil && !r.dev.cut.Load() {
			before = after
		}
	}
	if before == nil {
		before, after = r.m.clone(), r.m.clone()
	}
	if r.dev.cut.Load() {
		k := r.lastOp
		if i := bytes.IndexByte([]byte(k), ' '); i > 0 && k != "sync all" && k != "gc pass" {
			k = k[:i]
		}
		r.cutIn[k]++
	}
	st := r.e.Stats()
	r.gcWritten += st.GCWritten
	r.gcReset += st.GCResets
	if !r.dev.cut.Load() {
		r.dev.tick("end of segment")
		if r.dev.cut.CompareAndSwap(false, true) {
			r.dev.mu.Lock()
			r.dev.events = append(r.dev.events, fmt.Sprintf("cut after the segment's last operation, at #%d", r.dev.n.Load()))
			r.dev.mu.Unlock()
		}
		before = after
	}
	r.dev.mu.Lock()
	r.cutEvents = slices.Clone(r.dev.events)
	r.dev.mu.Unlock()
	kind := cutPlain
	if tear >= 0 {
		kind = cutTear
	}
	torn := powerCut(r.t, r.e, r.dev.Emu, kind, func() {}, func() int64 { return int64(tear) * BlockSize }, nil)
	r.logf("-- power cut (torn %v) --", torn)
	ok := true
	if err := fsckAfterCut(r.t, r.devName); err != nil {
		r.failf("fsck after the cut: %v", err)
		ok = false
	}
	r.open(false)
	pa := r.verify(after)
	if len(pa) > 0 {
		pb := r.verify(before)
		if len(pb) > 0 {
			if len(pb) > 6 {
				pb = pb[:6]
			}
			if len(pa) > 6 {
				pa = pa[:6]
			}
			r.failf("after the cut, the state matches neither model:\n  without the last op: %v\n  with it: %v", pb, pa)
			ok = false
		}
	}
	r.adopt()
	return ok
}

func runH23c(t *testing.T, seed uint64, segments int) {
	r := newH23cRun(t, memDevice(t, 24, "256K"))
	r.rng = rand.New(rand.NewPCG(seed, 23))
	r.open(true)
	for s := 0; s < segments; s++ {
		at := int64(1 + r.rng.IntN(h23cCutRange))
		tear := -1
		if r.rng.IntN(3) == 0 {
			tear = r.rng.IntN(4)
		}
		r.logf("== segment %d: cut at device op %d, tear %d ==", s, at, tear)
		ops := 0
		step := func() (before, after h23cModel, err error, more bool) {
			if ops++; ops > 300 {
				return nil, nil, nil, false
			}
			before, after, err = r.step()
			return before, after, err, true
		}
		if !r.segment(at, tear, step) {
			t.Logf("seed %d failed at segment %d", seed, s)
			break
		}
	}
	t.Logf("seed %d: cuts inside %v; GC relocated %d KiB, reset %d zones", seed, r.cutIn, r.gcWritten>>10, r.gcReset)
	r.e.Close()
}

// TestH23cPowerCutModel runs the model for a few seconds (seeds from 1);
// ZONEFOLD_H23C_SEEDS=FIRST-LAST runs those seeds instead, and
// ZONEFOLD_H23C_CUTRANGE=N cuts at up to the N-th device operation (400).
func TestH23cPowerCutModel(t *testing.T) {
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	budget := 4 * time.Second
	seeds := envSeeds(t, "ZONEFOLD_H23C_SEEDS")
	if seeds != nil {
		budget = 0
	} else {
		for s := uint64(1); s <= 1000; s++ {
			seeds = append(seeds, s)
		}
	}
	start := time.Now()
	for _, seed := range seeds {
		if budget > 0 && time.Since(start) > budget {
			break
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runH23c(t, seed, 20) })
	}
}

// h23cCutRange bounds the device operation a segment's cut lands on.
var h23cCutRange = func() int {
	if v, err := strconv.Atoi(os.Getenv("ZONEFOLD_H23C_CUTRANGE")); err == nil && v > 0 {
		return v
	}
	return 400
}()
