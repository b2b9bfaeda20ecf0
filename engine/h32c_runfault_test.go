package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zonefold/zonefold/zns"
)

// faultRun is one run of a scripted workload on an engine whose device
// fails one operation: it keeps the namespace and the contents the engine
// acknowledged (a write's fsync, a namespace operation, returned nil),
// and, after a failure, learns what the engine holds in memory (the
// operation done or not, checked to be one of the two) and gets it
// acknowledged before going on.
type faultRun struct {
	t      *testing.T
	rng    *rand.Rand
	e      *Engine
	cur    map[string][]byte // the engine's files, as they should read
	acked  map[string][]byte // as acknowledged durable
	fails  []string          // operations that failed, for the log
	events []string
	at     func(step int) // if set, called before each step
}

func (r *faultRun) logf(format string, args ...any) {
	r.events = append(r.events, fmt.Sprintf(format, args...))
}

// retry calls f until it succeeds, at most 8 times: a device that failed
// once works again, and each failure must be one a later call gets past.
func (r *faultRun) retry(what string, f func() error) {
	r.t.Helper()
	var err error
	for i := range 8 {
		if err = f(); err == nil {
			return
		}
		r.fails = append(r.fails, fmt.Sprintf("%s: %v", what, err))
		if i > 1 {
			time.Sleep(time.Duration(i) * 20 * time.Millisecond) // the settler's backoff
		}
	}
	r.t.Fatalf("%s keeps failing with the device working again: %v\nevents: %s", what, err, strings.Join(r.events, "; "))
}

// read returns name's content as the engine serves it, or nil if it does
// not exist.
func (r *faultRun) read(name string) []byte {
	r.t.Helper()
	var got []byte
	r.retry("read "+name, func() error {
		h, err := r.e.Open(name)
		if errors.Is(err, fs.ErrNotExist) {
			got = nil
			return nil
		}
		if err != nil {
			return err
		}
		defer h.Close()
		b := make([]byte, h.Size())
		if n, err := h.ReadAt(b, 0); n != len(b) || (err != nil && err != io.EOF) {
			return fmt.Errorf("read %d of %d: %w", n, len(b), err)
		}
		got = b
		return nil
	})
	return got
}

// settle learns what the engine holds of name after a failed operation:
// its content before (old) or after (want) it, nil for a file that does
// not exist, and has it acknowledged.
func (r *faultRun) settle(name string, old, want []byte) {
	r.t.Helper()
	got := r.read(name)
	switch {
	case bytes.Equal(got, want) && (got == nil) == (want == nil):
	case bytes.Equal(got, old) && (got == nil) == (old == nil):
	default:
		r.t.Fatalf("after a failed operation %q holds %d bytes (exists %v), neither the %d before (exists %v) nor the %d after (exists %v)\nevents: %s",
			name, len(got), got != nil, len(old), old != nil, len(want), want != nil, strings.Join(r.events, "; "))
	}
	r.setCur(name, got)
	if got != nil {
		r.retry("fsync "+name+" after a failure", func() error {
			h, err := r.e.Open(name)
			if err != nil {
				return err
			}
			defer h.Close()
			return h.Sync()
		})
	}
	r.retry("sync the namespace after a failure", r.e.SyncNamespace)
	r.ack(name)
}

func (r *faultRun) setCur(name string, b []byte) {
	if b == nil {
		delete(r.cur, name)
	} else {
		r.cur[name] = b
	}
}

func (r *faultRun) ack(name string) {
	if b, ok := r.cur[name]; ok {
		r.acked[name] = slices.Clone(b)
	} else {
		delete(r.acked, name)
	}
}

// write writes p at off of name and fsyncs it.
func (r *faultRun) write(name string, off int, p []byte) {
	r.t.Helper()
	old := r.cur[name]
	want := slices.Clone(old)
	if len(want) < off+len(p) {
		want = append(want, make([]byte, off+len(p)-len(want))...)
	}
	copy(want[off:], p)
	r.logf("write %s %d+%d", name, off, len(p))
	h, err := r.e.Open(name)
	if err != nil {
		r.t.Fatalf("open %s: %v\nfailures: %q\nevents: %s", name, err, r.fails, strings.Join(r.events, "; "))
	}
	defer h.Close()
	if n, err := h.WriteAt(p, int64(off)); err != nil {
		// A short write: the first n bytes went in (io.WriterAt).
		r.fails = append(r.fails, fmt.Sprintf("write %s (%d of %d bytes at %d): %v", name, n, len(p), off, err))
		if n < len(p) {
			want = slices.Clone(old)
			if len(want) < off+n {
				want = append(want, make([]byte, off+n-len(want))...)
			}
			copy(want[off:], p[:n])
		}
		r.settle(name, old, want)
		return
	}
	r.cur[name] = want
	if err := h.Sync(); err != nil {
		r.fails = append(r.fails, fmt.Sprintf("fsync %s: %v", name, err))
		r.settle(name, want, want)
		return
	}
	r.ack(name)
}

func (r *faultRun) truncate(name string, size int) {
	r.t.Helper()
	old := r.cur[name]
	size = min(size, len(old))
	want := slices.Clone(old[:size])
	r.logf("truncate %s %d", name, size)
	h, err := r.e.Open(name)
	if err != nil {
		r.t.Fatalf("open %s: %v\nfailures: %q\nevents: %s", name, err, r.fails, strings.Join(r.events, "; "))
	}
	defer h.Close()
	if err := h.Truncate(int64(size)); err != nil {
		r.fails = append(r.fails, fmt.Sprintf("truncate %s: %v", name, err))
		r.settle(name, old, want)
		return
	}
	r.cur[name] = want
	r.ack(name)
}

func (r *faultRun) create(name string) {
	r.t.Helper()
	old := r.cur[name]
	r.logf("create %s", name)
	h, err := r.e.Create(name)
	if err != nil {
		r.fails = append(r.fails, fmt.Sprintf("create %s: %v", name, err))
		r.settle(name, old, []byte{})
		return
	}
	h.Close()
	r.cur[name] = []byte{}
	r.ack(name)
}

func (r *faultRun) rename(from, to string) {
	r.t.Helper()
	src, dst := r.cur[from], r.cur[to]
	r.logf("rename %s %s", from, to)
	if err := r.e.Rename(from, to); err != nil {
		r.fails = append(r.fails, fmt.Sprintf("rename %s %s: %v", from, to, err))
		got := r.read(from)
		if got == nil { // done: to holds from's content
			r.settle(to, src, src)
		} else {
			r.settle(to, dst, dst)
		}
		r.settle(from, src, nil)
		return
	}
	r.cur[to] = src
	delete(r.cur, from)
	r.ack(to)
	r.ack(from)
}

func (r *faultRun) remove(name string) {
	r.t.Helper()
	old := r.cur[name]
	r.logf("remove %s", name)
	if err := r.e.Remove(name); err != nil {
		r.fails = append(r.fails, fmt.Sprintf("remove %s: %v", name, err))
		r.settle(name, old, nil)
		return
	}
	delete(r.cur, name)
	r.ack(name)
}

// h32cWorkload is the script: overwrites and appends with fsyncs to four
// files (enough garbage that GC runs), truncates, and namespace churn.
func (r *faultRun) workload(steps int) {
	data := []string{"d0", "d1", "d2", "d3"}
	churn := []string{"n0", "n1", "n2"}
	for _, n := range data {
		r.create(n)
	}
	for step := range steps {
		if r.at != nil {
			r.at(step)
		}
		name := data[r.rng.IntN(len(data))]
		switch k := r.rng.IntN(20); {
		case k < 10:
			p := make([]byte, 1+r.rng.IntN(96<<10))
			for i := range p {
				p[i] = byte(r.rng.Uint32())
			}
			r.write(name, r.rng.IntN(384<<10), p)
		case k < 12:
			r.truncate(name, r.rng.IntN(len(r.cur[name])+1))
		case k < 16:
			n := churn[r.rng.IntN(len(churn))]
			if _, ok := r.cur[n]; !ok {
				r.create(n)
				if _, ok := r.cur[n]; ok { // the create may have failed
					r.write(n, 0, bytes.Repeat([]byte(n), 1+r.rng.IntN(8<<10)))
				}
			} else {
				r.remove(n)
			}
		default:
			from, to := churn[r.rng.IntN(len(churn))], churn[r.rng.IntN(len(churn))]
			if _, ok := r.cur[from]; ok && from != to {
				r.rename(from, to)
			}
		}
	}
}

// check fails the test unless e holds exactly the acknowledged files.
func (r *faultRun) check(e *Engine, what string) {
	r.t.Helper()
	var names []string
	for _, fi := range e.List() {
		names = append(names, fi.Name)
	}
	want := slices.Sorted(func(yield func(string) bool) {
		for n := range r.acked {
			if !yield(n) {
				return
			}
		}
	})
	if !slices.Equal(names, want) {
		r.t.Fatalf("%s: files %q, acknowledged %q\nfailures: %q\nevents: %s", what, names, want, r.fails, strings.Join(r.events, "; "))
	}
	for name, data := range r.acked {
		if got := readAll(r.t, e, name); !bytes.Equal(got, data) {
			r.t.Fatalf("%s: %q reads %d bytes, acknowledged %d\nfailures: %q\nevents: %s", what, name, len(got), len(data), r.fails, strings.Join(r.events, "; "))
		}
	}
}

// TestDeviceFaultMidRunLosesNothingAcknowledged: a scripted workload
// (fsynced overwrites, truncates, creates, renames, removes, with GC
// running) on a device that fails one operation (the n-th write or
// append, read, flush, finish, zone reset or zone report, or a write or
// append that lands and reports EIO, n spread over the run's
// operations), or whose oldest open zone goes read-only: every operation either succeeds or fails with an error,
// the run goes on once the device works again, and after a kill -9
// (power cut) the reopened file system holds every acknowledged byte and
// namespace operation and nothing else, and fsck is clean. No hang: a run
// that does not end in time fails with the goroutines' stacks.
func TestDeviceFaultMidRunLosesNothingAcknowledged(t *testing.T) {
	// Small: GC relocates live data and reads go to the device.
	const query = "?zone_size=256K&zones=16&max_open=5&max_active=5"
	cfg := Config{CacheBytes: 1 << 20, DirtyLimit: 512 << 10, MaxOrder: 4}
	seeds, steps, points := uint64(2), 120, 6
	if testing.Short() || raceEnabled {
		seeds, steps, points = 1, 60, 3
	}
	// ZONEFOLD_FAULT_POINTS=n tries n points of each kind (every
	// operation, if n is at least their count): a denser sweep by hand.
	if v, err := strconv.Atoi(os.Getenv("ZONEFOLD_FAULT_POINTS")); err == nil && v > 0 {
		points = v
	}
	run := func(t *testing.T, seed uint64, arm func(*openFaultDev, *faultRun)) (opCounts, *faultRun) {
		t.Helper()
		devName := "emu:" + t.TempDir() + "/dev" + query
		dev, err := zns.Open(devName, zns.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Format(dev, FormatOptions{}); err != nil {
			t.Fatal(err)
		}
		emu := dev.(*zns.Emu)
		fd := &openFaultDev{Emu: emu}
		e, err := OpenDevice(fd, cfg)
		if err != nil {
			t.Fatal(err)
		}
		r := &faultRun{t: t, rng: rand.New(rand.NewPCG(seed, 32)), e: e, cur: map[string][]byte{}, acked: map[string][]byte{}}
		before := fd.counts()
		arm(fd, r)
		done := make(chan struct{})
		go func() {
			defer close(done)
			r.workload(steps)
		}()
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			var b strings.Builder
			pprof.Lookup("goroutine").WriteTo(&b, 2)
			t.Fatalf("the workload did not end in 2 minutes; events: %s\n%s", strings.Join(r.events, "; "), b.String())
		}
		if t.Failed() {
			t.FailNow()
		}
		if l := fd.limitErrs.Load(); l > 0 {
			t.Fatalf("the device refused %d operations for its open or active zone limits\nfailures: %q", l, r.fails)
		}
		n := fd.counts()
		n.read -= before.read
		n.write -= before.write
		n.flush -= before.flush
		n.finish -= before.finish
		n.reset -= before.reset
		n.report -= before.report
		// A fault the workload did not reach (it issued fewer
		// operations than its fault-free twin) is not the check's.
		fd.disarm()
		r.check(e, "before the crash")
		e.crashForTest()
		if err := emu.PowerCut(); err != nil {
			t.Fatal(err)
		}
		emu.Close()
		e2, err := Open(devName, cfg)
		if err != nil {
			t.Fatalf("reopen after the crash: %v\nfailures: %q", err, r.fails)
		}
		r.check(e2, "after the crash")
		if err := e2.Close(); err != nil {
			t.Fatal(err)
		}
		checkFsck(t, devName)
		return n, r
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			n, _ := run(t, seed, func(*openFaultDev, *faultRun) {})
			t.Logf("the run's device operations: %+v", n)
			// The zone open for appends longest goes read-only before
			// step i (its data still reads: nothing is lost).
			readOnlyAt := func(d *openFaultDev, r *faultRun, i int) {
				r.at = func(step int) {
					if step != i {
						return
					}
					p := &r.e.placer
					p.mu.Lock()
					z := -1
					if len(p.open) > 0 {
						z = p.open[0].idx
					}
					p.mu.Unlock()
					if z >= 0 {
						r.logf("zone %d read-only", z)
						if err := d.ZoneReadOnly(z); err != nil {
							r.t.Errorf("zone %d read-only: %v", z, err)
						}
					}
				}
			}
			for p := range min(points, steps) {
				i := p * steps / min(points, steps)
				t.Run(fmt.Sprintf("readonly%d", i), func(t *testing.T) {
					_, r := run(t, seed, func(d *openFaultDev, r *faultRun) { readOnlyAt(d, r, i) })
					if len(r.fails) > 0 {
						t.Logf("failed operations: %q", r.fails)
					}
				})
				if t.Failed() {
					return
				}
			}
			for _, k := range faultKinds(n) {
				if k.count == 0 {
					continue
				}
				for p := range min(points, k.count) {
					i := 1 + p*k.count/min(points, k.count)
					t.Run(fmt.Sprintf("%s%d", k.name, i), func(t *testing.T) {
						_, r := run(t, seed, func(d *openFaultDev, _ *faultRun) { k.arm(d, i) })
						if len(r.fails) > 0 {
							t.Logf("failed operations: %q", r.fails)
						}
					})
					if t.Failed() {
						return
					}
				}
			}
		})
	}
}
