package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"testing"
	"time"
)

// Durable namespace operations that arrive while a device flush runs
// share the next one (group commit), as durable creates already did
// (TestConcurrentCreatesShareADeviceFlush): each logs its record, then
// waits for a flush that started after it without holding the lock that
// orders the namespace. Before, a durable rename or remove held nsMu
// exclusively across its flush, and a truncate or grow held the
// collector across its flush, so K concurrent ones cost K flushes one
// after the other (fio laying out 1000 small files: ~1900 flushes), and
// these tests timed out waiting for the second operation to reach the
// flush.

// h40dShare runs op(0) until its flush is held (after the device flush),
// then op(1..n), each of which must log its record and wait for the
// running flush; then releases it, cuts the power as soon as all have
// returned, and returns the recovered engine and the device flushes the
// n+1 operations asked for.
func h40dShare(t *testing.T, n int, setup func(e *Engine), op func(e *Engine, i int) error) (*Engine, int64) {
	t.Helper()
	devName, emu, held, e := openHeldFlush(t, false)
	setup(e)
	if err := e.SyncNamespace(); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, n+1)
	calls := held.calls.Load()
	held.armed.Store(true)
	go func() { errs <- op(e, 0) }()
	within(t, held.flushed, "the first operation's flush")
	waiting := make(chan struct{}, n)
	testHookFlushWait = func() { waiting <- struct{}{} }
	defer func() { testHookFlushWait = nil }()
	for i := 1; i <= n; i++ {
		go func() { errs <- op(e, i) }()
		within(t, waiting, fmt.Sprintf("operation %d to wait for the running flush", i))
	}
	testHookFlushWait = nil
	e = releaseThenPowerCut(t, devName, emu, held, e, errs, n+1, "the operations")
	return e, held.calls.Load() - calls
}

func TestH40dConcurrentGrowsShareADeviceFlush(t *testing.T) {
	const n = 6
	e, flushes := h40dShare(t, n, func(e *Engine) {
		for i := range n + 1 {
			f := mustCreate(t, e, fmt.Sprintf("g%d", i))
			f.Close()
		}
	}, func(e *Engine, i int) error {
		f, err := e.Open(fmt.Sprintf("g%d", i))
		if err != nil {
			return err
		}
		defer f.Close()
		return f.Grow(int64(i+1) * BlockSize)
	})
	defer e.Close()
	if flushes != 2 {
		t.Errorf("%d concurrent grows asked the device for %d flushes: want 2 (the held one and one they share)", n+1, flushes)
	}
	for i := range n + 1 {
		fi, err := e.Stat(fmt.Sprintf("g%d", i))
		if err != nil || fi.Size != int64(i+1)*BlockSize {
			t.Errorf("grow of g%d to %d returned, then a power cut: %+v %v", i, (i+1)*BlockSize, fi, err)
		}
	}
}

func TestH40dConcurrentRenamesShareADeviceFlush(t *testing.T) {
	const n = 6
	e, flushes := h40dShare(t, n, func(e *Engine) {
		for i := range n + 1 {
			f := mustCreate(t, e, fmt.Sprintf("a%d", i))
			if _, err := f.WriteAt([]byte{byte(i)}, 0); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	}, func(e *Engine, i int) error {
		return e.Rename(fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i))
	})
	defer e.Close()
	if flushes != 2 {
		t.Errorf("%d concurrent renames asked the device for %d flushes: want 2 (the held one and one they share)", n+1, flushes)
	}
	for i := range n + 1 {
		if _, err := e.Stat(fmt.Sprintf("a%d", i)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a%d is back after its rename returned and a power cut: %v", i, err)
		}
		if got := readAll(t, e, fmt.Sprintf("b%d", i)); !bytes.Equal(got, []byte{byte(i)}) {
			t.Errorf("b%d after its rename and a power cut: %q", i, got)
		}
	}
}

func TestH40dConcurrentRemovesShareADeviceFlush(t *testing.T) {
	const n = 6
	e, flushes := h40dShare(t, n, func(e *Engine) {
		for i := range n + 1 {
			f := mustCreate(t, e, fmt.Sprintf("r%d", i))
			f.Close()
		}
	}, func(e *Engine, i int) error {
		return e.Remove(fmt.Sprintf("r%d", i))
	})
	defer e.Close()
	if flushes != 2 {
		t.Errorf("%d concurrent removes asked the device for %d flushes: want 2 (the held one and one they share)", n+1, flushes)
	}
	for i := range n + 1 {
		if _, err := e.Stat(fmt.Sprintf("r%d", i)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("r%d is back after its remove returned and a power cut: %v", i, err)
		}
	}
}

// A durable create that finds the name a rename has just given (logged,
// its flush still running) says the file exists durably: it returns only
// once the rename is durable, as one that finds a file whose create is
// flushing does (TestCreateOfAFileWhoseCreateIsFlushingWaitsForIt).
func TestH40dCreateOfANameBeingRenamedWaitsForTheRename(t *testing.T) {
	devName, emu, held, e := openHeldFlush(t, true) // held before it flushes
	f := mustCreate(t, e, "x")
	f.Close()
	held.armed.Store(true)
	errs := make(chan error, 2)
	go func() { errs <- e.Rename("x", "y") }()
	within(t, held.flushed, "the rename's flush")
	waiting := make(chan struct{}, 1)
	testHookFlushWait = func() { waiting <- struct{}{} }
	defer func() { testHookFlushWait = nil }()
	go func() {
		f, err := e.OpenFile("y", OCreate)
		if err == nil {
			err = f.Close()
		}
		errs <- err
	}()
	select {
	case err := <-errs:
		t.Fatalf("a create of y returned (%v) while the rename that named it had not reached the device", err)
	case <-waiting:
	case <-time.After(30 * time.Second):
		t.Fatal("no progress for 30 s waiting for the create of y")
	}
	testHookFlushWait = nil
	e = releaseThenPowerCut(t, devName, emu, held, e, errs, 2, "the rename and the create")
	defer e.Close()
	if _, err := e.Stat("y"); err != nil {
		t.Errorf("the rename to y and a create of y returned, then a power cut: %v", err)
	}
	if _, err := e.Stat("x"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("x is back after its rename returned and a power cut: %v", err)
	}
}

// A power cut inside a group: three durable operations that depend on one
// another (rename x to y, remove y, create x anew) have logged their
// records and wait for one flush that has not reached the device. The
// cut keeps k of the metadata log's unflushed blocks (a drive's cache
// may write back a prefix of a zone's writes): recovery must give the
// namespace after exactly the first k operations, never a later one
// without an earlier one.
func TestH40dPowerCutInsideAGroupReplaysAPrefix(t *testing.T) {
	for k := range 4 {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			devName, emu, held, e := openHeldFlush(t, true)
			old := bytes.Repeat([]byte("old"), 2000)
			f := mustCreate(t, e, "x")
			if _, err := f.WriteAt(old, 0); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			f.Close()
			meta0, meta1 := e.sb.MetaZones[0], e.sb.MetaZones[1]+e.sb.MetaGroup
			errs := make(chan error, 3)
			held.armed.Store(true)
			go func() { errs <- e.Rename("x", "y") }()
			within(t, held.flushed, "the rename's flush")
			waiting := make(chan struct{}, 2)
			testHookFlushWait = func() { waiting <- struct{}{} }
			defer func() { testHookFlushWait = nil }()
			go func() { errs <- e.Remove("y") }()
			within(t, waiting, "the remove to wait for the flush")
			go func() {
				f, err := e.Create("x")
				if err == nil {
					err = f.Close()
				}
				errs <- err
			}()
			within(t, waiting, "the create to wait for the flush")
			testHookFlushWait = nil
			e.crashForTest()
			kept := int64(0)
			if err := emu.PowerCutKeeping(func(zone int, n int64) int64 {
				if zone >= meta0 && zone < meta1 {
					kept = min(n, int64(k)*BlockSize)
					return kept
				}
				return 0
			}); err != nil {
				t.Fatal(err)
			}
			if kept != int64(k)*BlockSize {
				t.Fatalf("the metadata log kept %d unflushed bytes, want %d: the three records are not its only unflushed blocks", kept, k*BlockSize)
			}
			if err := held.Close(); err != nil {
				t.Fatal(err)
			}
			close(held.release)
			for range 3 {
				within(t, errs, "the operations to end")
			}
			e = reopen(t, devName, smallConfig())
			defer e.Close()
			names := map[string]int64{}
			for _, fi := range e.List() {
				names[fi.Name] = fi.Size
			}
			want := []map[string]int64{
				{"x": int64(len(old))}, // nothing
				{"y": int64(len(old))}, // the rename
				{},                     // and the remove
				{"x": 0},               // and the create
			}[k]
			if fmt.Sprint(names) != fmt.Sprint(want) {
				t.Fatalf("after a cut keeping %d of the group's records: %v, want %v", k, names, want)
			}
			if k == 0 || k == 1 {
				name := map[int]string{0: "x", 1: "y"}[k]
				if got := readAll(t, e, name); !bytes.Equal(got, old) {
					t.Fatalf("%s after the cut: %d bytes, want its %d synced", name, len(got), len(old))
				}
			}
			checkFsck(t, devName)
		})
	}
}
