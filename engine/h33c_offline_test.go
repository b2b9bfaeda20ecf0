package engine

import (
	"bytes"
	"testing"
	"time"
)

// h33cWaitCheckpoint waits for a checkpoint numbered after before (the
// Stats().Checkpoints count), for up to a generous bound: the engine
// owes one from the moment it learns a zone went offline. If none comes
// the test goes on, and what it checks next (an Open after a crash)
// says what that costs.
func h33cWaitCheckpoint(t *testing.T, e *Engine, before int64) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if e.Stats().Checkpoints > before {
			return
		}
	}
	t.Logf("no checkpoint after the engine found the zone offline")
}

// h33cAppendFindsOffline is h32cOfflineSetup with the zone's condition
// durable, then h32cWriteAfter and an fsync, which fails: the append
// finds a's zone offline. It waits for the checkpoint that owes.
func h33cAppendFindsOffline(t *testing.T, devName string, cfg Config) (e *Engine, first, other []byte, f *File, second []byte) {
	t.Helper()
	e, first, other, _ = h32cOfflineSetup(t, devName, cfg)
	h33cFlushEmu(t, e)
	before := e.Stats().Checkpoints
	f, second = h32cWriteAfter(t, e, first)
	if err := f.Sync(); err == nil {
		t.Fatal("fsync with a's zone offline returned nil")
	}
	h33cWaitCheckpoint(t, e, before)
	return e, first, other, f, second
}

// TestKill9AfterAnAppendFoundAZoneOfflineOpens: an append finds a's zone
// offline (the fsync fails), and the daemon is killed before any other
// fsync. The engine knew the zone was offline: the next Open must not
// refuse the whole file system (ErrZoneOffline) for it. The other file
// reads whole; what a held there reads as its bytes or fails, never
// as other bytes.
func TestKill9AfterAnAppendFoundAZoneOfflineOpens(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "&max_open=4&max_active=4")
	cfg := smallConfig()
	e, first, other, _, _ := h33cAppendFindsOffline(t, devName, cfg)
	e = powerCutReopen(t, e, devName, cfg)
	defer e.Close()
	if got := readAll(t, e, "b"); !bytes.Equal(got, other) {
		t.Fatal("b after the crash differs")
	}
	h33cReadOrFail(t, e, "a", first)
}

// TestKill9AfterAReadFoundAZoneOfflineOpens: a zone holding a file's
// data (and room for more: recovery cannot rule out newer records there)
// goes offline while nothing writes to it, and a read of the file finds
// it. After a kill -9 then, the engine knew: the next Open must not
// refuse. Reads of what the zone held fail, never read zeros.
func TestKill9AfterAReadFoundAZoneOfflineOpens(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "&max_open=4&max_active=4")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	first := bytes.Repeat([]byte("before "), 20000)
	createSynced(t, e, "a", first).Close()
	other := bytes.Repeat([]byte("other file "), 30000)
	createSynced(t, e, "b", other).Close()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = reopen(t, devName, cfg) // nothing cached
	z := e.zoneAt(devOf(t, e, "a", 0).dev)
	if z == e.zoneAt(devOf(t, e, "b", 0).dev) {
		t.Fatalf("set-up: a and b share zone %d", z.idx)
	}
	if a := z.alloc.Load(); a >= z.cap {
		t.Fatalf("set-up: a's zone %d is allocated to its capacity (%d)", z.idx, a)
	}
	if err := emuOf(t, e).ZoneOffline(z.idx); err != nil {
		t.Fatal(err)
	}
	h33cFlushEmu(t, e)
	before := e.Stats().Checkpoints
	h, err := e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := h.ReadAt(make([]byte, 8192), 0); err == nil {
		t.Fatalf("read of a in offline zone %d: %d bytes, no error", z.idx, n)
	}
	h.Close()
	h33cWaitCheckpoint(t, e, before)
	e = powerCutReopen(t, e, devName, cfg)
	defer e.Close()
	if got := readAll(t, e, "b"); !bytes.Equal(got, other) {
		t.Fatal("b after the crash differs")
	}
	h, err = e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if n, err := h.ReadAt(make([]byte, 8192), 0); err == nil {
		t.Fatalf("read of a's data in offline zone %d after the crash: %d bytes, no error", z.idx, n)
	}
}

// TestCachedDataOfAnOfflineZoneIsWrittenAgain: a's fsynced bytes are in
// the cache, clean, when their zone goes offline; an append finds it.
// The engine still holds those bytes: it writes them again elsewhere,
// so the next fsync that succeeds covers them, and a power cut after it
// loses none of the file.
func TestCachedDataOfAnOfflineZoneIsWrittenAgain(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "&max_open=4&max_active=4")
	cfg := smallConfig()
	e, first, other, f, second := h33cAppendFindsOffline(t, devName, cfg)
	h32cSyncAgain(t, f)
	want := append(append([]byte{}, first...), second...)
	e = powerCutReopen(t, e, devName, cfg)
	defer e.Close()
	if got := readAll(t, e, "a"); !bytes.Equal(got, want) {
		t.Fatalf("a after an fsync that succeeded and a power cut: %d bytes, want the %d it held", len(got), len(want))
	}
	if got := readAll(t, e, "b"); !bytes.Equal(got, other) {
		t.Fatal("b after the crash differs")
	}
}

// h33cReadOrFail reads name's first len(want) bytes block by block:
// each reads as want's or fails, never as other bytes.
func h33cReadOrFail(t *testing.T, e *Engine, name string, want []byte) {
	t.Helper()
	h, err := e.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	buf := make([]byte, BlockSize)
	for off := 0; off+BlockSize <= len(want); off += BlockSize {
		if _, err := h.ReadAt(buf, int64(off)); err == nil && !bytes.Equal(buf, want[off:off+BlockSize]) {
			t.Fatalf("%s at %d reads other bytes than it held", name, off)
		}
	}
}

// h33cFlushEmu makes the emulator's zone conditions durable, as a real
// device's are the moment a zone goes offline: the emulator keeps them
// with its data, which a power cut takes back until a flush.
func h33cFlushEmu(t *testing.T, e *Engine) {
	t.Helper()
	if err := emuOf(t, e).Flush(); err != nil {
		t.Fatal(err)
	}
}
