package engine

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
)

// A writer short of space whose only victim worth collecting holds a
// file inside a truncate's window (the zeros' record numbered, not
// complete: GC skips it, errTailUnsettled) waits for the window to end
// and collects the victim then, rather than getting ENOSPC from a
// device the truncate is about to let GC free. The wait ends with the
// writer's context too.
//
// Before, admission did not wait for the window: with dirty data about
// it wrote everything back (SyncAll), which here, where the window is
// held open inside the truncating file's writeback, never returned (the
// hang guard fired), and otherwise waited for the window only by
// accident, once per write; without dirty data, or skipping a victim
// again, it reported ENOSPC.
func TestAdmissionWaitsForTruncateWindow(t *testing.T) {
	t.Run("waits", func(t *testing.T) { testAdmissionTruncateWindow(t, false) })
	t.Run("cancelled", func(t *testing.T) { testAdmissionTruncateWindow(t, true) })
}

func testAdmissionTruncateWindow(t *testing.T, cancel bool) {
	cfg := Config{CacheBytes: 4 << 20, DirtyLimit: 1 << 20}
	cfg.GC.Disabled = true
	e := formatOpen(t, emuDevice(t, 12, "256K", ""), cfg)
	defer e.Close()
	// "t": 12 copies of its first 10000 bytes, each synced (16 KiB
	// records), then 512 KiB past a hole: its first zone fills with 11
	// dead copies, the live one and the start of the big write, the
	// only garbage on the device.
	tf := mustCreate(t, e, "t")
	small := copiesThenBig(t, tf, 12, 512<<10)
	victim := fileZone(t, e, tf)
	if victim.state.Load() != zoneFull || victim.cap-victim.valid.Load() < e.admitGain() {
		t.Fatalf("t's first zone: state %d, %d valid of %d: want it full and worth collecting", victim.state.Load(), victim.valid.Load(), victim.cap)
	}
	// "f" takes the free space, leaving room for the truncate's tail
	// (its zeros' block and header) but not for a 64 KiB write.
	//
	// Each write is written back, and out of the dirty count, before
	// the next looks for room: a record in flight counts twice in
	// roomFor (its room is taken at placement, its blocks stay dirty
	// until its writeback ends), so a fill that let background
	// writeback run beside it found less room in admission than its own
	// check had, and under load either ran GC for it, collecting the
	// victim before the truncate (the writer then found no victim to
	// wait for: it wrote everything back, which waits for the truncate's
	// own writeback, and got ENOSPC), or stopped short, leaving the
	// 64 KiB write room.
	ff := mustCreate(t, e, "f")
	off := int64(0)
	const keep = 4 * BlockSize
	before := e.Stats()
	for _, bs := range []int64{64 << 10, BlockSize} {
		chunk := bytes.Repeat([]byte{byte(bs)}, int(bs))
		for e.roomFor(writeCharge(off, bs) + keep) {
			if _, err := ff.WriteAt(chunk, off); err != nil {
				t.Fatalf("fill at %d: %v", off, err)
			}
			off += bs
			if err := ff.Sync(); err != nil {
				t.Fatal(err)
			}
			waitNoDirty(t, e)
		}
	}
	// The set-up's premises, checked: the fill ran no GC, and t's first
	// zone is still the full victim it was.
	if st := e.Stats(); st.GCRuns != before.GCRuns || st.GCResets != before.GCResets {
		t.Fatalf("the fill ran GC (runs %d, resets %d; before %d, %d): the test wants t's first zone the only victim", st.GCRuns, st.GCResets, before.GCRuns, before.GCResets)
	}
	if victim.state.Load() != zoneFull || victim.cap-victim.valid.Load() < e.admitGain() {
		t.Fatalf("after the fill, t's first zone: state %d, %d valid of %d: want it full and worth collecting", victim.state.Load(), victim.valid.Load(), victim.cap)
	}
	w := bytes.Repeat([]byte("writer!!"), (64<<10)/8)
	if e.roomFor(writeCharge(off, int64(len(w)))) {
		t.Fatal("the 64 KiB write fits without GC: the test wants it short of space")
	}
	resets := e.Stats().GCResets
	// In the truncate's window, the writer writes; the hook returns (and
	// the window can end) once the writer waits, or has failed.
	waiting := make(chan struct{}, 1)
	testHookTailWait = func(*Engine) {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}
	armed, ran := false, false
	werr := make(chan error, 1)
	testHookTruncateTail = func(*Engine) { armed = true }
	testHookNumbered = func(_ *Engine, f *file) {
		if !armed || ran || f != tf.f {
			return
		}
		ran = true
		ctx, stop := context.WithCancel(context.Background())
		t.Cleanup(stop)
		go func() {
			_, err := ff.WriteAtContext(ctx, w, off)
			werr <- err
		}()
		select {
		case <-waiting:
			if cancel {
				stop()
				werr <- <-werr // the writer returns while the window is open
			}
		case err := <-werr:
			werr <- err
		case <-time.After(time.Minute):
			t.Error("the writer neither waited nor returned within a minute (hang guard)")
		}
	}
	t.Cleanup(func() { testHookTruncateTail, testHookNumbered, testHookTailWait = nil, nil, nil })
	if err := tf.Truncate(5000); err != nil {
		t.Fatal(err)
	}
	testHookTruncateTail, testHookNumbered = nil, nil
	if !ran {
		t.Fatal("the hook never ran")
	}
	var err error
	select {
	case err = <-werr:
	case <-time.After(time.Minute):
		t.Fatal("the writer did not return within a minute (hang guard)")
	}
	if cancel {
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("write cancelled while it waited for the truncate: %v, want context.Canceled", err)
		}
		return
	}
	if err != nil {
		t.Fatalf("write while a truncate held the only victim: %v (stats %+v)", err, e.Stats())
	}
	if e.Stats().GCResets == resets {
		t.Fatal("the write fit without GC: the test wants the victim collected")
	}
	if err := ff.Sync(); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, e, "t")
	if len(got) != 5000 || !bytes.Equal(got, small[:5000]) {
		t.Fatalf("t after the truncate: %d bytes, want the first 5000 of what it held", len(got))
	}
	back := make([]byte, len(w))
	if _, err := ff.ReadAt(back, off); err != nil || !bytes.Equal(back, w) {
		t.Fatalf("the write does not read back: %v", err)
	}
}

// waitNoDirty waits (a minute at most) until the cache counts no dirty
// data: a Sync returns once its file's writeback has ended, which may be
// just before the cache takes the blocks out of its dirty count.
func waitNoDirty(t *testing.T, e *Engine) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); e.cache.DirtyBytes() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes still dirty a minute after a sync", e.cache.DirtyBytes())
		}
	}
}
