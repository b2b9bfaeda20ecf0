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

	// 2. The partial block it must read first fails with EIO.
	e.cache.EvictClean(1 << 30)
	emuOf(t, e).FailRead(1)
	if n, err := h.WriteAt(make([]byte, 5000), int64(len(want))-1000); n != 0 || !errors.Is(err, syscall.EIO) {
		t.Fatalf("write over a failing read: %d, %v; want 0, EIO", n, err)
	}
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
			h, err := e.Create(name)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := h.WriteAt(old, 0); err != nil {
				t.Fatal(err)
			}
			if err := h.Sync(); err != nil {
				t.Fatal(err)
			}
			e.cache.EvictClean(1 << 30)
			handles[i] = h
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
