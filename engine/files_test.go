package engine

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestFailedWriteLeavesSizeAndContent: a write that fails before it
// writes anything — its context cancelled while it is throttled, or the
// read of a partial block it needs failing with EIO — leaves the file's
// size and bytes as they were, live and after a reopen. (The size grew
// before the data went into the cache, so the file kept the new size,
// filled with zeros.)
func TestFailedWriteLeavesSizeAndContent(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := Config{CacheBytes: 4 << 20, DirtyLimit: 256 << 10}
	// No background writeback: dirty data stays above the limit, so a
	// write is throttled until an fsync.
	cfg.Writeback.Background = 1 << 40
	cfg.Writeback.Expire = time.Hour
	e := formatOpen(t, devName, cfg)
	h, err := e.Create("a")
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte("size"), 10000) // 40000 bytes
	if _, err := h.WriteAt(want, 0); err != nil {
		t.Fatal(err)
	}
	if err := h.Sync(); err != nil {
		t.Fatal(err)
	}
	check := func(what string) {
		t.Helper()
		if got := h.Size(); got != int64(len(want)) {
			t.Fatalf("%s: size %d, want %d", what, got, len(want))
		}
		if got := readAll(t, e, "a"); !bytes.Equal(got, want) {
			t.Fatalf("%s: content changed", what)
		}
	}

	// 1. Cancelled while throttled.
	filler, err := e.Create("filler")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := filler.WriteAt(make([]byte, 512<<10), 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if n, err := h.WriteAtContext(ctx, make([]byte, 10000), 50000); n != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("throttled write with a cancelled context: %d, %v; want 0, context.Canceled", n, err)
	}
	check("after a cancelled write")
	if err := filler.Sync(); err != nil {
		t.Fatal(err)
	}

	// 2. The partial block it must read first fails with EIO (bad
	// media: read again, it fails again).
	e.cache.EvictClean(1 << 30)
	emuOf(t, e).FailReadBad(1)
	if n, err := h.WriteAt(make([]byte, 5000), int64(len(want))-1000); n != 0 || !errors.Is(err, syscall.EIO) {
		t.Fatalf("write over a failing read: %d, %v; want 0, EIO", n, err)
	}
	emuOf(t, e).FailRead(0) // healed
	check("after a write that failed with EIO")

	if err := h.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = reopen(t, devName, cfg)
	defer e.Close()
	if h, err = e.Open("a"); err != nil {
		t.Fatal(err)
	}
	check("after reopen")
}

// TestTruncateRacingWriteAt: Truncate(0) and a write (then fsync) of the
// same file race. Whichever order they take, the bytes the write did not
// cover read as zeros, and after a power cut the file is what it was
// before the cut: both calls returned, so both are durable. (Truncate cut
// the extent map at the size a racing write had grown, leaving stale
// bytes mapped below it, and logged the truncate after the write's
// record, so that recovery cut fsynced data.)
func TestTruncateRacingWriteAt(t *testing.T) {
	devName := emuDevice(t, 32, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	const files, rounds = 12, 4
	old := bytes.Repeat([]byte{0xee}, 16<<10)
	data := bytes.Repeat([]byte{0x5a}, 4<<10)
	names := make([]string, files)
	live := make([][]byte, files)
	for i := range names {
		names[i] = string(rune('a' + i))
	}
	for round := range rounds {
		handles := make([]*File, files)
		for i, name := range names {
			handles[i] = createSynced(t, e, name, old)
			e.cache.EvictClean(1 << 30)
		}
		var wg sync.WaitGroup
		for _, h := range handles {
			wg.Go(func() {
				if err := h.Truncate(0); err != nil {
					t.Error(err)
				}
			})
			wg.Go(func() {
				if _, err := h.WriteAt(data, 4<<10); err != nil {
					t.Error(err)
				}
				if err := h.Sync(); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		for i, name := range names {
			live[i] = readAll(t, e, name)
			// Either the write came first (and was cut) or the truncate
			// did: bytes outside the write's range are zeros.
			switch len(live[i]) {
			case 0:
			case 8 << 10:
				if !bytes.Equal(live[i][:4<<10], make([]byte, 4<<10)) || !bytes.Equal(live[i][4<<10:], data) {
					t.Fatalf("round %d, file %s: stale bytes under a racing truncate and write", round, name)
				}
			default:
				t.Fatalf("round %d, file %s: %d bytes after truncate(0) and a 4 KiB write at 4 KiB", round, name, len(live[i]))
			}
		}
	}
	emu := emuOf(t, e)
	e.crashForTest()
	if err := emu.PowerCut(); err != nil {
		t.Fatal(err)
	}
	emu.Close()
	e = reopen(t, devName, cfg)
	defer e.Close()
	for i, name := range names {
		f, err := e.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, f.Size())
		if _, err := f.ReadAt(got, 0); err != nil && err != io.EOF {
			t.Fatal(err)
		}
		if !bytes.Equal(got, live[i]) {
			t.Errorf("file %s: %d bytes after the power cut, %d before: an fsynced or truncated state was lost", name, len(got), len(live[i]))
		}
	}
}

// TestTruncateCutIsDurableBeforeGCReusesTheZone: a truncate makes the
// blocks it cuts garbage; a GC pass must not reset their zone before the
// truncate is logged, or a crash in between brings them back from the
// checkpoint pointing into a reset (and reused) zone. The hook runs a GC
// pass in that window if it can take the collector, flushes (as another
// file's fsync would), then cuts the power before the truncate's log
// record. Before the fix (found by TestPowerCutLoop, on main as well:
// fsck "points at device offset ..., where no record carries it") the
// pass reset a's zone and fsck found that damage.
func TestTruncateCutIsDurableBeforeGCReusesTheZone(t *testing.T) {
	devName := emuDevice(t, 16, "256K", "")
	cfg := Config{CacheBytes: 4 << 20, DirtyLimit: 2 << 20, MaxOrder: 4}
	e := formatOpen(t, devName, cfg)
	f, err := e.Create("a")
	if err != nil {
		t.Fatal(err)
	}
	// Two zones' worth: at least one full zone holds only a's blocks.
	if _, err := f.WriteAt(bytes.Repeat([]byte{9}, 512<<10), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := e.checkpoint(); err != nil { // a's extents are in it
		t.Fatal(err)
	}
	emu := emuOf(t, e)
	ran := false
	testHookTruncateCut = func(e *Engine) {
		testHookTruncateCut = nil
		if e.gc.mu.TryLock() {
			ran = true
			if _, err := e.gc.passLocked(gcUrgent, minGCGain); err != nil {
				t.Errorf("gc pass: %v", err)
			}
			e.gc.mu.Unlock()
		}
		// Another file's fsync makes what happened so far durable.
		if err := e.dev.Flush(); err != nil {
			t.Errorf("flush: %v", err)
		}
		emu.Close() // the power fails before the truncate is logged
	}
	t.Cleanup(func() { testHookTruncateCut = nil })
	if err := f.Truncate(0); err == nil {
		t.Fatal("truncate returned nil with the device gone before its log record")
	}
	e.crashForTest()
	if err := fsckAfterCut(t, devName); err != nil {
		t.Fatalf("fsck after a power cut between a truncate's cut and its log record (GC pass in between: %v): %v", ran, err)
	}
	e = reopen(t, devName, cfg)
	defer e.Close()
	if got := readAll(t, e, "a"); len(got) != 512<<10 || !bytes.Equal(got, bytes.Repeat([]byte{9}, 512<<10)) {
		t.Fatalf("after the cut power: a is %d bytes, want its 512 KiB intact (the truncate never became durable)", len(got))
	}
}
