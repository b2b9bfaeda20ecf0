package engine

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// h36bBorrowedReserve makes a device where GC holds a zone it took from
// its reserve (fewer than GC.Reserve zones free) and has nothing to
// collect: "keep" and "gone" share the first zone, half each, in one
// shared stream (PolicyNone), then keep fills the device until only
// GC's reserve is free (records of a quarter zone with their headers:
// no pads, no garbage worth a pass); then GC takes a reserve zone for
// its stream, as a pass's copies do (the reservation it makes there
// is filled with a pad). It returns GC's zone.
func h36bBorrowedReserve(t *testing.T, e *Engine) *zone {
	t.Helper()
	keep := mustCreate(t, e, "keep")
	gone := mustCreate(t, e, "gone")
	chunk := bytes.Repeat([]byte{'k'}, 60<<10)
	// keep@0, gone@0, keep@60K, gone@60K, then keep alone.
	var koff, goff int64
	for i := 0; ; i++ {
		h, at := keep, &koff
		if i == 1 || i == 3 {
			h, at = gone, &goff
		}
		if _, err := h.WriteAt(chunk, *at); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		if err := h.Sync(); err != nil {
			t.Fatalf("fsync %d: %v", i, err)
		}
		*at += int64(len(chunk))
		z := e.placer.shared.Load()
		if i > 3 && e.placer.freeCount() <= e.cfg.GC.Reserve && z != nil && z.remaining() <= e.geo.ZoneCap/2 {
			break
		}
	}
	for _, h := range []*File{keep, gone} {
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if moved, err := e.gc.pass(gcBackground); moved || err != nil {
		t.Fatalf("GC pass before any garbage: moved %v, %v: the test wants nothing to collect", moved, err)
	}
	before := e.placer.space()
	gz := gcTakesReserveZone(t, e)
	t.Logf("GC's zone %d has %d left; free zones %d; space %d before, %d after", gz.idx, gz.remaining(), e.placer.freeCount(), before, e.placer.space())
	return gz
}

// TestH36bBorrowedRoomIsGCsEvenWithNoVictim: while GC holds a zone it
// took from its reserve, the room left there is not the clients' even
// when GC has nothing to collect at the moment admission asks: garbage
// a client makes later without taking any room (a remove) gives GC a
// victim, GC copies it into that room, and the victim's reset refills
// the reserve, not the clients' room. A rule that counted the borrowed
// room for admission while no victim is worth collecting (placer.space
// before 2aac551 did, in that state) admitted b's writes into it, and
// b's fsync then met ENOSPC ("place 90112 bytes of file 3: no space
// left on device").
//
// Here, GC holding a reserve zone with nothing to collect
// (h36bBorrowedReserve), b writes all that admission allows; gone is
// removed (the first zone is half garbage, no room taken); a GC pass
// collects that zone into GC's zone and its reset refills the reserve;
// b's fsync must succeed, and b read back whole.
func TestH36bBorrowedRoomIsGCsEvenWithNoVictim(t *testing.T) {
	cfg := Config{CacheBytes: 8 << 20, DirtyLimit: 4 << 20, Policy: PolicyNone, FinishTail: -1}
	cfg.GC.Disabled = true
	e := formatOpen(t, emuDevice(t, 12, "256K", ""), cfg)
	defer e.Close()
	gz := h36bBorrowedReserve(t, e)
	b, boff := fillBUntilRefused(t, e)
	if boff == 0 {
		t.Fatalf("admission took nothing of b (space %d): the test wants b's data dirty", e.placer.space())
	}
	if err := e.Remove("gone"); err != nil {
		t.Fatal(err)
	}
	collectThenSyncB(t, e, gz, b, boff, "the half-garbage zone")
}

// TestH36bReserveHeldSaysSo: a write refused while GC holds zones of
// its reserve says so, and how much room those zones hold: the user
// otherwise saw "no zone's reclaim frees" beside free zones and room
// in an open zone, and could not tell why the write did not fit.
func TestH36bReserveHeldSaysSo(t *testing.T) {
	cfg := Config{CacheBytes: 8 << 20, DirtyLimit: 4 << 20, Policy: PolicyNone, FinishTail: -1}
	cfg.GC.Disabled = true
	e := formatOpen(t, emuDevice(t, 12, "256K", ""), cfg)
	defer e.Close()
	h36bBorrowedReserve(t, e)
	b, err := writeUntilNoSpace(t, e, "b")
	for _, want := range []string{"GC has taken 1 of its 2 reserve zones", "held for its copies until its resets refill the reserve"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("ENOSPC %q does not say %q", err, want)
		}
	}
	if err := b.Sync(); err != nil {
		t.Fatalf("fsync of what was admitted: %v", err)
	}
}

// writeUntilNoSpace creates name and writes it block by block until a
// write is refused, which must be ENOSPC (its error, to read what it
// says), within the device's capacity.
func writeUntilNoSpace(t *testing.T, e *Engine, name string) (*File, error) {
	t.Helper()
	b := mustCreate(t, e, name)
	block := bytes.Repeat([]byte{'b'}, BlockSize)
	var err error
	for off := int64(0); err == nil; off += BlockSize {
		if off > e.Capacity() {
			t.Fatalf("%d bytes written, more than the capacity, and no ENOSPC", off)
		}
		_, err = b.WriteAt(block, off)
	}
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("write refused with %v, want ENOSPC", err)
	}
	return b, err
}
