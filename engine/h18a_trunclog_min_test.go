package engine

import (
	"bytes"
	"testing"
	"time"

	"github.com/zonefold/zonefold/zns"
)

// TestH18aTruncateFailedOnFullLogThenFsyncLosesCut is the reduced form of
// TestH18aFailedTruncateThenFsyncLosesCut. The active metadata half fills
// up (plain truncates); the next operation's half switch fails (the
// device refuses writes for a moment): the switch backs off, the half
// stays full, and no failed record is in the log (no stray). The device
// heals. Within the backoff, f (fsynced at 12 blocks) is truncated to 6
// blocks: logSize fails with ErrMetaLog, but File.truncate has already
// set the size, truncated the cache and (cutAndLog) cut the extent map,
// and puts none of them back. f reads as 6 blocks. Its fsync succeeds:
// f has no dirty data, the log owes no checkpoint (no stray), so the
// flush acknowledges a size nothing on the device carries. After a
// power cut f is back at 12 blocks, its cut bytes readable again: the
// size its fsync acknowledged is lost.
func TestH18aTruncateFailedOnFullLogThenFsyncLosesCut(t *testing.T) {
	h18aFailedOpOnFullLog(t, func(h *File) error { return h.Truncate(6 * BlockSize) })
}

// TestH18aGrowFailedOnFullLogThenFsyncLosesSize is the same with a Grow
// (a sparse extension to 20 blocks): it fails, f reads as 20 blocks, its
// fsync succeeds, and after a power cut f is 12 blocks again.
func TestH18aGrowFailedOnFullLogThenFsyncLosesSize(t *testing.T) {
	h18aFailedOpOnFullLog(t, func(h *File) error { return h.Grow(20 * BlockSize) })
}

// TestH18aTruncateFailedOnFullLogThenWriteFsyncResurrectsCutBytes: the
// failed truncate to 6 blocks, then a write of block 10 (blocks 6-9 read
// as zeros: a hole), then a successful fsync. The write's record carries
// the 11-block size, so the size survives the power cut; but blocks 6-9,
// fsynced as zeros, come back holding the old bytes the failed truncate
// cut in memory.
func TestH18aTruncateFailedOnFullLogThenWriteFsyncResurrectsCutBytes(t *testing.T) {
	h18aFailedOpOnFullLog(t, func(h *File) error {
		err := h.Truncate(6 * BlockSize)
		if _, werr := h.WriteAt(bytes.Repeat([]byte{9}, BlockSize), 10*BlockSize); werr != nil {
			t.Fatal(werr)
		}
		return err
	})
}

func h18aFailedOpOnFullLog(t *testing.T, op func(h *File) error) {
	devName := memDevice(t, 20, "256K")
	cfg := Config{CacheBytes: 1 << 20, DirtyLimit: 512 << 10, MaxOrder: 4}
	e := formatOpen(t, devName, cfg)
	emu := e.dev.(*zns.Emu)
	h := mustCreate(t, e, "f")
	if _, err := h.WriteAt(bytes.Repeat([]byte{7}, 12*BlockSize), 0); err != nil {
		t.Fatal(err)
	}
	if err := h.Sync(); err != nil {
		t.Fatal(err)
	}
	g := mustCreate(t, e, "g")
	m := e.meta
	wp := func() (int, int64) {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.active, m.wp
	}
	capacity := e.sb.metaHalfCap()
	half, last := wp()
	var step int64
	for i := 0; ; i++ {
		if err := g.Truncate(int64(i%2+1) * BlockSize); err != nil {
			t.Fatal(err)
		}
		a, w := wp()
		if a != half {
			t.Fatalf("the half switched before the test filled it (step %d)", step)
		}
		step, last = w-last, w
		if last+step+metaVoidRoom > capacity {
			break
		}
	}
	// Fill it: with writes refused, the switch an operation needs fails.
	emu.FailWrites(true)
	var gerr error
	fails := 0
	for i := 0; i < 6 && fails < 2; i++ {
		if err := g.Truncate(int64(i%2+1) * BlockSize); err != nil {
			gerr = err
			fails++ // two failed switches in a row: a backoff of tens of ms
		}
	}
	emu.FailWrites(false)
	if gerr == nil {
		t.Fatal("no truncate of g failed")
	}
	t.Logf("g: %v (stray %v)", gerr, m.stray.Load())

	terr := op(h)
	t.Logf("truncate/grow f: %v; f reads as %d bytes", terr, h.Size())
	if terr == nil {
		t.Fatal("set-up: the operation did not fail")
	}
	// Within the switch's backoff the fsync must fail (it cannot make the
	// change durable); once the backoff ends its checkpoint does.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := h.Sync()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fsync still fails after the backoff: %v", err)
		}
		t.Logf("fsync: %v", err)
	}
	acked := h.Size()
	want := make([]byte, acked)
	if _, err := h.ReadAt(want, 0); err != nil {
		t.Fatal(err)
	}
	t.Logf("fsync of f acknowledged %d bytes", acked)
	e = powerCutReopen(t, e, devName, cfg)
	defer e.Close()
	got := readAll(t, e, "f")
	if int64(len(got)) != acked {
		t.Fatalf("after the power cut f is %d bytes; its successful fsync acknowledged %d (the failed truncate's cut stayed in memory, never became durable)", len(got), acked)
	}
	if i := firstDiff(got, want); i >= 0 {
		t.Fatalf("after the power cut f's byte %d (block %d) is %d; its successful fsync acknowledged %d (the failed truncate's cut bytes are back)", i, i/BlockSize, got[i], want[i])
	}
}
