package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/zonefold/zonefold/uring"
	"github.com/zonefold/zonefold/zns"
)

// opCounts counts a device's operations by kind.
type opCounts struct {
	read, write, flush, finish, reset, report int
}

// openFaultDev is an emulated device that counts its operations and
// fails the n-th ResetZone or Report from when it is armed with EIO (the
// emulator's own faults cover reads, writes, flushes and finishes:
// zns.Emu.FailRead and the rest). It embeds the *zns.Emu so that the
// engine sees every optional interface the emulator has.
type openFaultDev struct {
	*zns.Emu
	mu                sync.Mutex
	n                 opCounts
	resetIn, reportIn int
	// landIn: the n-th write or append lands whole, and its completion
	// reports EIO all the same (a device that wrote the data, then
	// failed the command).
	landIn int
	// limitErrs counts the operations the device refused for its open
	// or active zone limits: the engine must never pass them.
	limitErrs atomic.Int64
}

// limitErr counts err if it is a refusal for the zone limits, and
// returns it.
func (d *openFaultDev) limitErr(err error) error {
	if errors.Is(err, zns.ErrTooManyOpen) || errors.Is(err, zns.ErrTooManyActive) {
		d.limitErrs.Add(1)
	}
	return err
}

// limitCheck counts an append's completion refused for the zone limits.
type limitCheck struct {
	c zns.AppendCompletion
	d *openFaultDev
}

func (l limitCheck) Appended(off int64, err error) {
	l.d.limitErr(err)
	l.c.Appended(off, err)
}

// landedEIO reports an append that landed as failed with EIO.
type landedEIO struct{ c zns.AppendCompletion }

func (l landedEIO) Appended(off int64, err error) {
	if err == nil {
		err = fmt.Errorf("openFaultDev: append landed at %d, reported failed: %w", off, syscall.EIO)
	}
	l.c.Appended(off, err)
}

// landedWriteEIO reports a write that landed as failed with EIO.
type landedWriteEIO struct{ c uring.Completion }

func (l landedWriteEIO) Complete(res uring.Result) {
	if res.Res >= 0 {
		res.Res = -int32(syscall.EIO)
	}
	l.c.Complete(res)
}

func (d *openFaultDev) count(f func(*opCounts)) {
	d.mu.Lock()
	f(&d.n)
	d.mu.Unlock()
}

func (d *openFaultDev) counts() opCounts {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n
}

// failNow counts an operation down (countdown as zns's FailWrite) and
// reports whether it is the one to fail.
func (d *openFaultDev) failNow(countdown *int) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if *countdown == 0 {
		return false
	}
	*countdown--
	return *countdown == 0
}

func (d *openFaultDev) Read(off int64, buf []byte, c uring.Completion) error {
	d.count(func(n *opCounts) { n.read++ })
	return d.Emu.Read(off, buf, c)
}

func (d *openFaultDev) Write(zone int, off int64, bufs [][]byte, c uring.Completion) error {
	d.count(func(n *opCounts) { n.write++ })
	if d.failNow(&d.landIn) {
		c = landedWriteEIO{c}
	}
	return d.limitErr(d.Emu.Write(zone, off, bufs, c))
}

func (d *openFaultDev) Append(zone int, bufs [][]byte, c zns.AppendCompletion) error {
	d.count(func(n *opCounts) { n.write++ })
	if d.failNow(&d.landIn) {
		c = landedEIO{c}
	}
	return d.limitErr(d.Emu.Append(zone, bufs, limitCheck{c, d}))
}

func (d *openFaultDev) AppendSums(zone int, bufs [][]byte, sums []uint32, c zns.AppendCompletion) error {
	d.count(func(n *opCounts) { n.write++ })
	if d.failNow(&d.landIn) {
		c = landedEIO{c}
	}
	return d.limitErr(d.Emu.AppendSums(zone, bufs, sums, limitCheck{c, d}))
}

func (d *openFaultDev) Flush() error {
	d.count(func(n *opCounts) { n.flush++ })
	return d.Emu.Flush()
}

func (d *openFaultDev) FlushCut(cut func()) error {
	d.count(func(n *opCounts) { n.flush++ })
	return d.Emu.FlushCut(cut)
}

func (d *openFaultDev) FinishZone(zone int) error {
	d.count(func(n *opCounts) { n.finish++ })
	return d.Emu.FinishZone(zone)
}

func (d *openFaultDev) ResetZone(zone int) error {
	d.count(func(n *opCounts) { n.reset++ })
	if d.failNow(&d.resetIn) {
		return fmt.Errorf("openFaultDev: reset zone %d: %w", zone, syscall.EIO)
	}
	return d.Emu.ResetZone(zone)
}

func (d *openFaultDev) Report(first int, zones []zns.Zone) (int, error) {
	d.count(func(n *opCounts) { n.report++ })
	if d.failNow(&d.reportIn) {
		return 0, fmt.Errorf("openFaultDev: report zones from %d: %w", first, syscall.EIO)
	}
	return d.Emu.Report(first, zones)
}

// faultKind is one kind of device fault: count of the operations a
// fault-free run issues, and arm, which makes the i-th of them fail.
type faultKind struct {
	name  string
	count int
	arm   func(d *openFaultDev, i int)
}

// faultKinds are the faults openFaultDev injects, for a run whose
// fault-free twin issued the operations n counts.
func faultKinds(n opCounts) []faultKind {
	set := func(field func(*openFaultDev) *int) func(*openFaultDev, int) {
		return func(d *openFaultDev, i int) {
			d.mu.Lock()
			*field(d) = i
			d.mu.Unlock()
		}
	}
	return []faultKind{
		{"read", n.read, func(d *openFaultDev, i int) { d.FailRead(i) }},
		{"write", n.write, func(d *openFaultDev, i int) { d.FailWrite(i) }},
		{"flush", n.flush, func(d *openFaultDev, i int) { d.FailFlush(i) }},
		{"finish", n.finish, func(d *openFaultDev, i int) { d.FailFinish(i) }},
		{"reset", n.reset, set(func(d *openFaultDev) *int { return &d.resetIn })},
		{"report", n.report, set(func(d *openFaultDev) *int { return &d.reportIn })},
		{"landed", n.write, set(func(d *openFaultDev) *int { return &d.landIn })},
	}
}

// disarm takes every armed fault away.
func (d *openFaultDev) disarm() {
	d.FailRead(0)
	d.FailWrite(0)
	d.FailFlush(0)
	d.FailFinish(0)
	d.mu.Lock()
	d.resetIn, d.reportIn, d.landIn = 0, 0, 0
	d.mu.Unlock()
}

// h32cCrashImage leaves an emulated device (name devName) as a killed
// daemon does: fsynced data and durable namespace operations since the
// last checkpoint (a file overwritten whole, leaving zones with nothing
// valid for recovery to reset; a rename, a remove, a truncate inside a
// block) and a write never fsynced. It returns the acknowledged files.
func h32cCrashImage(t *testing.T, devName string, cfg Config) map[string][]byte {
	t.Helper()
	e := formatOpen(t, devName, cfg)
	want := map[string][]byte{}
	pattern := func(seed byte, n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = seed + byte(i/4096)
		}
		return b
	}
	big := createSynced(t, e, "big", pattern(1, 1<<20))
	newBig := pattern(50, 1<<20)
	if _, err := big.WriteAt(newBig, 0); err != nil {
		t.Fatal(err)
	}
	if err := big.Sync(); err != nil {
		t.Fatal(err)
	}
	want["big"] = newBig
	createSynced(t, e, "a", pattern(100, 200<<10)).Close()
	b := createSynced(t, e, "b", pattern(150, 96<<10))
	b.Close()
	if err := e.Rename("b", "c"); err != nil {
		t.Fatal(err)
	}
	want["c"] = pattern(150, 96<<10)
	createSynced(t, e, "gone", pattern(200, 64<<10)).Close()
	if err := e.Remove("gone"); err != nil {
		t.Fatal(err)
	}
	a, err := e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Truncate(100<<10 + 123); err != nil {
		t.Fatal(err)
	}
	want["a"] = pattern(100, 200<<10)[:100<<10+123]
	u := mustCreate(t, e, "unsynced")
	if err := u.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := u.WriteAt(pattern(7, 128<<10), 0); err != nil {
		t.Fatal(err)
	}
	emu := emuOf(t, e)
	e.crashForTest()
	if err := emu.PowerCut(); err != nil {
		t.Fatal(err)
	}
	emu.Close()
	return want
}

// emuPath is the file an emu: device name keeps the device in.
func emuPath(devName string) string {
	p, _, _ := strings.Cut(strings.TrimPrefix(devName, "emu:"), "?")
	return p
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// checkFiles fails the test unless e holds every acknowledged file as
// want has it.
func checkFiles(t *testing.T, e *Engine, want map[string][]byte, what string) {
	t.Helper()
	for name, data := range want {
		if got := readAll(t, e, name); !bytes.Equal(got, data) {
			t.Fatalf("%s: file %q: %d bytes, want %d (equal prefix %v)", what, name, len(got), len(data),
				bytes.Equal(got[:min(len(got), len(data))], data[:min(len(got), len(data))]))
		}
	}
	if _, err := e.Open("gone"); err == nil {
		t.Fatalf("%s: the removed file is back", what)
	}
}

// TestOpenWithTheDeviceFailingLosesNothing: recovery of a crashed file
// system on a device that fails one operation of Open (the n-th read,
// write, flush, finish, reset or zone report, for every n Open issues)
// either opens with every acknowledged byte and namespace operation there
// or fails with an error that wraps EIO and says what failed; it never
// panics, never opens with something missing, and never leaves the
// device so that a later Open, with the fault gone, loses anything or
// fsck finds damage.
func TestOpenWithTheDeviceFailingLosesNothing(t *testing.T) {
	const query = "?zone_size=256K&zones=32&max_open=6&max_active=6"
	dir := t.TempDir()
	golden := dir + "/golden"
	cfg := Config{CacheBytes: 4 << 20, DirtyLimit: 1 << 20}
	want := h32cCrashImage(t, "emu:"+golden+query, cfg)
	work := dir + "/work"
	workName := "emu:" + work + query

	open := func(arm func(*openFaultDev)) (*Engine, *openFaultDev, error) {
		t.Helper()
		copyFile(t, golden, work)
		dev, err := zns.Open(workName, zns.Options{})
		if err != nil {
			t.Fatal(err)
		}
		fd := &openFaultDev{Emu: dev.(*zns.Emu)}
		arm(fd)
		e, err := OpenDevice(fd, cfg)
		if err != nil {
			dev.Close()
		}
		return e, fd, err
	}
	e, fd, err := open(func(*openFaultDev) {})
	if err != nil {
		t.Fatalf("open without faults: %v", err)
	}
	n := fd.counts()
	checkFiles(t, e, want, "open without faults")
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Open's device operations: %+v", n)
	if n.reset == 0 || n.write == 0 || n.flush == 0 {
		t.Fatalf("the crash image gives recovery no resets, writes or flushes to fail: %+v", n)
	}

	for _, k := range faultKinds(n) {
		failed := 0
		for i := 1; i <= k.count; i++ {
			what := fmt.Sprintf("%s %d of %d failed", k.name, i, k.count)
			e, fd, err := open(func(d *openFaultDev) { k.arm(d, i) })
			fd.disarm() // what follows checks the outcome, not more faults
			if err != nil {
				failed++
				if !errors.Is(err, syscall.EIO) || !strings.HasPrefix(err.Error(), "engine: ") {
					t.Fatalf("%s: Open failed with %q, want an engine error wrapping EIO", what, err)
				}
			} else {
				t.Logf("%s: opened", what)
				checkFiles(t, e, want, what+", opened")
				if err := e.Close(); err != nil {
					t.Fatalf("%s: opened, then Close: %v", what, err)
				}
			}
			e2, err := Open(workName, cfg)
			if err != nil {
				t.Fatalf("%s: Open without the fault: %v", what, err)
			}
			checkFiles(t, e2, want, what+", then opened without it")
			if err := e2.Close(); err != nil {
				t.Fatalf("%s: Close after: %v", what, err)
			}
			checkFsck(t, workName)
		}
		t.Logf("%s faults: Open failed for %d of %d", k.name, failed, k.count)
	}
}
