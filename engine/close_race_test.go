package engine

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zonefold/zonefold/zns"
)

// closeRaceChunk is what each writer of TestCloseDuringOperations
// appends per round: not a multiple of the block size, so that its
// truncates cut inside a block (File.zeroTail).
const closeRaceChunk = 20000

// closeRaceByte is byte j of writer w's chunk k.
func closeRaceByte(w, k, j int) byte { return byte(w*31 + k*7 + j%251 + 1) }

func closeRaceData(w, k int) []byte {
	p := make([]byte, closeRaceChunk)
	for j := range p {
		p[j] = closeRaceByte(w, k, j)
	}
	return p
}

// closeErrOK fails the test unless err is nil or the engine's ErrClosed.
func closeErrOK(t *testing.T, what string, err error) bool {
	t.Helper()
	if err == nil {
		return true
	}
	if !errors.Is(err, ErrClosed) {
		t.Errorf("%s: %v, want success or ErrClosed", what, err)
	}
	return false
}

// Close runs while goroutines write, fsync, read, truncate, create,
// rename and remove in loops: nothing panics or hangs, every operation
// either succeeds or fails with ErrClosed (new ones, and those Close
// woke), Close returns nil (it drains what was running, writes back and
// checkpoints), and after reopening the device every fsynced byte is
// there.
//
// Before, a file's operations did not check for a closed engine: they ran
// on into the cache's unmapped arena and the closed device (the test
// binary died of SIGSEGV under -race, or hung).
func TestCloseDuringOperations(t *testing.T) {
	for round := range 3 {
		t.Run(fmt.Sprint(round), testCloseDuringOperations)
	}
}

func testCloseDuringOperations(t *testing.T) {
	devName := emuDevice(t, 24, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	const writers = 4
	durable := make([]int64, writers) // bytes of each file fsynced
	var synced atomic.Int64           // fsyncs that succeeded, all writers
	var wg sync.WaitGroup
	for w := range writers {
		h := mustCreate(t, e, fmt.Sprintf("f%d", w))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				off := int64(k) * closeRaceChunk
				data := closeRaceData(w, k)
				if _, err := h.WriteAt(data, off); !closeErrOK(t, "write", err) {
					return
				}
				if k%3 == 1 {
					// Cut the chunk inside a block, then write it again.
					if err := h.Truncate(off + closeRaceChunk/2 + 1); !closeErrOK(t, "truncate", err) {
						return
					}
					if _, err := h.WriteAt(data, off); !closeErrOK(t, "rewrite", err) {
						return
					}
				}
				if err := h.Sync(); !closeErrOK(t, "fsync", err) {
					return
				}
				durable[w] = off + closeRaceChunk
				synced.Add(1)
				// Read back an earlier chunk.
				r := k / 2
				got := make([]byte, closeRaceChunk)
				n, err := h.ReadAt(got, int64(r)*closeRaceChunk)
				if !closeErrOK(t, "read", err) {
					return
				}
				if n != len(got) || !bytes.Equal(got, closeRaceData(w, r)) {
					t.Errorf("writer %d: chunk %d reads back wrong (%d bytes)", w, r, n)
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			name := fmt.Sprintf("ns%d", i%5)
			h, err := e.Create(name)
			if !closeErrOK(t, "create", err) {
				return
			}
			_, err = h.WriteAt([]byte("namespace"), 0)
			h.Close()
			if !closeErrOK(t, "write", err) {
				return
			}
			if err := e.Rename(name, name+"r"); !closeErrOK(t, "rename", err) {
				return
			}
			if err := e.Remove(name + "r"); !closeErrOK(t, "remove", err) {
				return
			}
		}
	}()
	// Close once every writer is well under way.
	for synced.Load() < 3*writers && !t.Failed() {
		time.Sleep(time.Millisecond)
	}
	closed := make(chan error, 1)
	go func() { closed <- e.Close() }()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("operations still running two minutes after Close began (hang guard)")
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("Close did not return within two minutes (hang guard)")
	}
	if _, err := e.Create("late"); !errors.Is(err, ErrClosed) {
		t.Fatalf("create after Close: %v, want ErrClosed", err)
	}
	e = reopen(t, devName, cfg)
	defer e.Close()
	for w := range writers {
		got := readAll(t, e, fmt.Sprintf("f%d", w))
		if int64(len(got)) < durable[w] {
			t.Fatalf("f%d: %d bytes after reopen, %d were fsynced", w, len(got), durable[w])
		}
		for k := 0; int64(k)*closeRaceChunk < durable[w]; k++ {
			if !bytes.Equal(got[k*closeRaceChunk:(k+1)*closeRaceChunk], closeRaceData(w, k)) {
				t.Fatalf("f%d: fsynced chunk %d differs after reopen", w, k)
			}
		}
	}
}

// A writer parked in the cache's throttle (dirty data over the limit,
// and writeback failing, every append of it EIO, so it never falls) is woken by Close and returns ErrClosed; Close returns, having
// lost only data never fsynced.
//
// Before, Close stopped writeback and unmapped the cache under the
// parked writer, which waited for ever (the hang guard fired).
func TestCloseWakesThrottledWriter(t *testing.T) {
	devName := emuDevice(t, 24, "1M", "")
	cfg := Config{CacheBytes: 4 << 20, DirtyLimit: 512 << 10}
	cfg.GC.Disabled = true
	// Once failing, every append writeback makes fails.
	var failing atomic.Pointer[zns.Emu]
	testHookWriteExtents = func(*Engine, uint64) {
		if emu := failing.Load(); emu != nil {
			emu.FailWrite(1)
		}
	}
	t.Cleanup(func() { testHookWriteExtents = nil })
	e := formatOpen(t, devName, cfg)
	h := mustCreate(t, e, "f")
	synced := bytes.Repeat([]byte("durable!"), 8192)
	if _, err := h.WriteAt(synced, 0); err != nil {
		t.Fatal(err)
	}
	if err := h.Sync(); err != nil {
		t.Fatal(err)
	}
	failing.Store(emuOf(t, e))
	werr := make(chan error, 1)
	go func() {
		big := bytes.Repeat([]byte{9}, 2<<20)
		_, err := h.WriteAt(big, int64(len(synced)))
		werr <- err
	}()
	guard := time.After(2 * time.Minute)
	for e.Stats().Cache.Throttles == 0 {
		select {
		case err := <-werr:
			t.Fatalf("the writer returned (%v) before it was throttled", err)
		case <-guard:
			t.Fatal("the writer was not throttled within two minutes")
		case <-time.After(time.Millisecond):
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- e.Close() }()
	select {
	case err := <-werr:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("throttled write: %v, want ErrClosed", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the throttled writer still waits two minutes after Close began (hang guard)")
	}
	select {
	case err := <-closed:
		var lost *lostAtClose
		if err != nil && !errors.As(err, &lost) {
			t.Fatalf("Close: %v, want nil or the unsynced data lost", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("Close did not return within two minutes (hang guard)")
	}
	failing.Store(nil)
	e = reopen(t, devName, cfg)
	defer e.Close()
	got := readAll(t, e, "f")
	if len(got) < len(synced) || !bytes.Equal(got[:len(synced)], synced) {
		t.Fatalf("the fsynced bytes differ after reopen (%d bytes)", len(got))
	}
}
