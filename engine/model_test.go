package engine

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// modelFile is what a file must hold: its current bytes, the bytes its
// last fsync made durable, and which positions were written since.
type modelFile struct {
	data    []byte
	durable []byte
	touched []bool // written since the last fsync, by position
	resized bool   // size changed by a write since the last fsync
}

func (m *modelFile) write(p []byte, off int) {
	if end := off + len(p); end > len(m.data) {
		m.data = append(m.data, make([]byte, end-len(m.data))...)
		m.resized = true
	}
	copy(m.data[off:], p)
	for len(m.touched) < len(m.data) {
		m.touched = append(m.touched, false)
	}
	for i := off; i < off+len(p); i++ {
		m.touched[i] = true
	}
}

// truncated models a truncate to size: durable, and so is the size;
// bytes written since the last fsync inside the new size are still not.
func (m *modelFile) truncated(size int) {
	if size < len(m.data) {
		m.data = m.data[:size]
	} else {
		m.data = append(m.data, make([]byte, size-len(m.data))...)
	}
	m.durable = append(m.durable[:0:0], m.durable[:min(size, len(m.durable))]...)
	for len(m.durable) < size {
		m.durable = append(m.durable, 0)
	}
	if len(m.touched) > size {
		m.touched = m.touched[:size]
	}
	for len(m.touched) < size {
		m.touched = append(m.touched, false)
	}
	m.resized = false
}

func (m *modelFile) synced() {
	m.durable = append(m.durable[:0], m.data...)
	m.touched = make([]bool, len(m.data))
	m.resized = false
}

// modelRun drives an engine and a model with the same random operations.
type modelRun struct {
	t       *testing.T
	rng     *rand.Rand
	devName string
	cfg     Config
	e       *Engine
	files   map[string]*modelFile
	// canReopen allows clean close and reopen; canCrash power cuts (emu).
	canReopen, canCrash bool
	ops                 []string // the last operations, for failure messages
}

func (r *modelRun) logf(format string, args ...any) {
	r.ops = append(r.ops, fmt.Sprintf(format, args...))
	if len(r.ops) > 40 {
		r.ops = r.ops[1:]
	}
}

func (r *modelRun) fatalf(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("%s\nlast operations:\n  %s", fmt.Sprintf(format, args...), joinLines(r.ops))
}

func joinLines(s []string) string {
	var b bytes.Buffer
	for i, l := range s {
		if i > 0 {
			b.WriteString("\n  ")
		}
		b.WriteString(l)
	}
	return b.String()
}

func (r *modelRun) names() []string {
	var out []string
	for n := range r.files {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (r *modelRun) pick() (string, *modelFile) {
	names := r.names()
	if len(names) == 0 {
		return "", nil
	}
	n := names[r.rng.IntN(len(names))]
	return n, r.files[n]
}

// checkAll reads every file whole and compares it with the model.
func (r *modelRun) checkAll() {
	r.t.Helper()
	list := r.e.List()
	if len(list) != len(r.files) {
		r.fatalf("engine lists %d files, model has %d", len(list), len(r.files))
	}
	for _, fi := range list {
		m := r.files[fi.Name]
		if m == nil {
			r.fatalf("engine has file %q the model does not", fi.Name)
		}
		r.compare(fi.Name, m, 0, len(m.data)+100)
	}
}

func (r *modelRun) compare(name string, m *modelFile, off, n int) {
	r.t.Helper()
	f, err := r.e.Open(name)
	if err != nil {
		r.fatalf("open %q: %v", name, err)
	}
	got := make([]byte, n)
	k, err := f.ReadAt(got, int64(off))
	want := []byte{}
	if off < len(m.data) {
		want = m.data[off:min(off+n, len(m.data))]
	}
	if k != len(want) || (err != nil && err != io.EOF) || (k < n && err != io.EOF) {
		r.fatalf("read %q [%d,+%d): %d bytes, %v; model has %d bytes", name, off, n, k, err, len(want))
	}
	if !bytes.Equal(got[:k], want) {
		i := 0
		for i < k && got[i] == want[i] {
			i++
		}
		r.fatalf("read %q [%d,+%d): byte %d is %#x, model %#x", name, off, n, off+i, got[i], want[i])
	}
}

// randomWrite draws a write of random bytes at an offset below span:
// unaligned and up to three blocks, or a quarter of the time whole
// blocks, up to 16.
func (r *modelRun) randomWrite(span int) ([]byte, int) {
	off := r.rng.IntN(span)
	n := 1 + r.rng.IntN(3*BlockSize+100)
	if r.rng.IntN(4) == 0 {
		off = off / BlockSize * BlockSize
		n = (1 + r.rng.IntN(16)) * BlockSize
	}
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(r.rng.Uint32())
	}
	return p, off
}

func (r *modelRun) step() {
	e := r.e
	switch op := r.rng.IntN(100); {
	case op < 8 || len(r.files) == 0:
		name := fmt.Sprintf("f%d", r.rng.IntN(12))
		r.logf("create %s", name)
		if _, err := e.Create(name); err != nil {
			r.fatalf("create %s: %v", name, err)
		}
		if m := r.files[name]; m != nil {
			m.data = m.data[:0]
			m.synced() // Create truncates, durably
		} else {
			r.files[name] = &modelFile{}
		}
	case op < 50:
		name, m := r.pick()
		p, off := r.randomWrite(96 * 1024)
		n := len(p)
		r.logf("write %s at %d, %d bytes", name, off, n)
		f, _ := e.Open(name)
		if k, err := f.WriteAt(p, int64(off)); err != nil || k != n {
			r.fatalf("write %s: %d, %v", name, k, err)
		}
		m.write(p, off)
	case op < 70:
		name, m := r.pick()
		off := r.rng.IntN(len(m.data) + 10)
		n := 1 + r.rng.IntN(4*BlockSize)
		r.logf("read %s at %d, %d bytes", name, off, n)
		r.compare(name, m, off, n)
	case op < 76:
		name, m := r.pick()
		size := r.rng.IntN(len(m.data) + 2*BlockSize)
		r.logf("truncate %s to %d", name, size)
		f, _ := e.Open(name)
		if err := f.Truncate(int64(size)); err != nil {
			r.fatalf("truncate: %v", err)
		}
		m.truncated(size)
	case op < 80:
		name, _ := r.pick()
		r.logf("remove %s", name)
		if err := e.Remove(name); err != nil {
			r.fatalf("remove: %v", err)
		}
		delete(r.files, name)
	case op < 84:
		name, m := r.pick()
		to := fmt.Sprintf("f%d", r.rng.IntN(12))
		r.logf("rename %s to %s", name, to)
		if err := e.Rename(name, to); err != nil {
			r.fatalf("rename: %v", err)
		}
		delete(r.files, name)
		r.files[to] = m
	case op < 93:
		name, m := r.pick()
		r.logf("fsync %s", name)
		f, _ := e.Open(name)
		if err := f.Sync(); err != nil {
			r.fatalf("fsync: %v", err)
		}
		m.synced()
	case op < 96 && r.canReopen:
		r.logf("close and reopen")
		if err := e.Close(); err != nil {
			r.fatalf("close: %v", err)
		}
		r.e = reopen(r.t, r.devName, r.cfg)
		for _, m := range r.files {
			m.synced() // Close writes everything back
		}
		r.checkAll()
	case r.canCrash:
		r.crash()
	default:
		r.logf("sync all")
		if err := e.Sync(r.t.Context()); err != nil {
			r.fatalf("sync: %v", err)
		}
	}
}

// crash cuts power to the emulated device mid-workload, reopens, and
// checks that every fsynced byte survived; the model then adopts what
// survived of unsynced data.
func (r *modelRun) crash() {
	r.t.Helper()
	emu := r.e.dev.(*zns.Emu)
	if r.rng.IntN(3) == 0 {
		// Let some unsynced data reach the device first.
		_ = r.e.wb.SyncAll(r.t.Context())
	}
	r.logf("power cut")
	r.e.crashForTest()
	if err := emu.PowerCut(); err != nil {
		r.fatalf("power cut: %v", err)
	}
	_ = emu.Close()
	r.e = reopen(r.t, r.devName, r.cfg)
	list := r.e.List()
	if len(list) != len(r.files) {
		r.fatalf("after power cut: %d files, model %d (%v vs %v)", len(list), len(r.files), list, r.names())
	}
	for _, fi := range list {
		m := r.files[fi.Name]
		if m == nil {
			r.fatalf("after power cut: unexpected file %q", fi.Name)
		}
		f, _ := r.e.Open(fi.Name)
		got := make([]byte, fi.Size)
		if k, err := f.ReadAt(got, 0); int64(k) != fi.Size || (err != nil && err != io.EOF) {
			r.fatalf("after power cut: read %q: %d, %v", fi.Name, k, err)
		}
		if why := m.mismatch(got); why != "" {
			r.fatalf("after power cut: %q %s", fi.Name, why)
		}
		m.data = got
		m.synced()
	}
}

// mismatch says why got, the whole file read after a power cut, cannot
// be what m held (every fsynced byte not written since, and the size if
// nothing was), or "" if it can.
func (m *modelFile) mismatch(got []byte) string {
	if !m.resized && len(got) != len(m.data) && !anyTouched(m) {
		return fmt.Sprintf("has %d bytes, fsynced %d", len(got), len(m.data))
	}
	for i := 0; i < len(m.durable) && i < len(got); i++ {
		if i < len(m.touched) && m.touched[i] {
			continue
		}
		if got[i] != m.durable[i] {
			return fmt.Sprintf("byte %d is %#x, fsynced %#x", i, got[i], m.durable[i])
		}
	}
	if !anyTouched(m) && len(got) < len(m.durable) {
		return fmt.Sprintf("lost fsynced bytes: %d of %d", len(got), len(m.durable))
	}
	return ""
}

func anyTouched(m *modelFile) bool {
	for _, t := range m.touched {
		if t {
			return true
		}
	}
	return m.resized
}

func newModelRun(t *testing.T, devName string, cfg Config, seed uint64) *modelRun {
	return &modelRun{t: t, rng: rand.New(rand.NewPCG(seed, 99)), devName: devName, cfg: cfg,
		files: map[string]*modelFile{}}
}

// run does steps random operations, then checks every file, then closes.
func (r *modelRun) run(steps int) {
	defer func() {
		if err := r.e.Close(); err != nil {
			r.t.Errorf("close: %v", err)
		}
	}()
	for range steps {
		r.step()
	}
	r.checkAll()
}

func runModel(t *testing.T, devName string, cfg Config, seed uint64, steps int, durable bool) {
	r := newModelRun(t, devName, cfg, seed)
	r.canReopen, r.canCrash = durable, durable
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if durable {
		if _, err := Format(dev, FormatOptions{}); err != nil {
			t.Fatal(err)
		}
		r.e, err = OpenDevice(dev, cfg)
	} else {
		r.e, err = FormatAndOpen(dev, cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	r.run(steps)
	if durable {
		checkFsck(t, devName)
	}
}

// checkFsck runs fsck on a closed device and fails on any problem.
func checkFsck(t *testing.T, devName string) {
	t.Helper()
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	rep, err := Fsck(dev)
	if err != nil {
		t.Fatalf("fsck: %v", err)
	}
	if len(rep.Problems) > 0 {
		t.Fatalf("fsck found damage: %v", rep.Problems)
	}
}

func TestModelEmu(t *testing.T) {
	seeds := 12
	if testing.Short() {
		seeds = 3
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			cfg := Config{CacheBytes: 1 << 20, DirtyLimit: 256 << 10, MaxOrder: 4}
			runModel(t, emuDevice(t, 40, "256K", ""), cfg, seed, 400, true)
		})
	}
}

func TestModelEmuZoneLimits(t *testing.T) {
	// More files than open zones, strict limits, small appends.
	cfg := Config{CacheBytes: 2 << 20, DirtyLimit: 512 << 10}
	runModel(t, emuDevice(t, 40, "256K", "&max_open=4&max_active=5&max_append=16K"), cfg, 7, 500, true)
}

func TestModelNull(t *testing.T) {
	// null: keeps no data, so reads must all be cache hits: the cache is
	// larger than everything written, and no crash or reopen happens.
	cfg := Config{CacheBytes: 64 << 20}
	runModel(t, "null:?size=64M&zone_size=1M", cfg, 3, 600, false)
}
