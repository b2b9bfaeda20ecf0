package engine

import (
	"bytes"
	"fmt"
	"testing"
)

// TestH25cTailFinishKeepsAdmittedRoom: a file's last close gives up the
// rest of its zone when less than Config.FinishTail is left there
// (finishTail). That room is part of the space admission counted for
// the dirty data other files were let write: on a device with no
// garbage, a file whose writes were accepted into the last of the room
// must still fit at its fsync ("a write it accepted fits when its fsync
// comes"), whatever file closes meanwhile.
//
// Tails of 60 KiB come back through GC (a pass copies the finished
// zone's data to gain its tail); tails under minGCGain (16 KiB) never
// do: no pass gains enough. With six 12 KiB tails finished, b's fsync
// failed with ENOSPC ("place 28672 bytes of file 7: no space left on
// device", GC resets 0) on a device where b's every write had been
// accepted: finishTail gave up room admission had promised. The churn
// of TestH25cFullDeviceChurnUnderZoneLimits met the same ENOSPC at
// fsync about one run in three under -race.
func TestH25cTailFinishKeepsAdmittedRoom(t *testing.T) {
	for _, c := range []struct {
		tail  int64
		files int
	}{{60 << 10, 4}, {12 << 10, 6}} {
		t.Run(fmt.Sprintf("%dx%dK", c.files, c.tail>>10), func(t *testing.T) { testH25cTailFinish(t, c.tail, c.files) })
	}
}

func testH25cTailFinish(t *testing.T, tail int64, files int) {
	cfg := Config{CacheBytes: 8 << 20, DirtyLimit: 4 << 20}
	e := formatOpen(t, emuDevice(t, 12, "256K", ""), cfg)
	defer e.Close()
	// "a0".."a3": one synced record each, each in a zone of its own,
	// that leaves 60 KiB of it (under the default FinishTail, a
	// quarter zone).
	var as []*File
	var azs []*zone
	for i := range files {
		a := mustCreate(t, e, fmt.Sprintf("a%d", i))
		if _, err := a.WriteAt(bytes.Repeat([]byte{'a'}, int(e.geo.ZoneCap-tail-BlockSize)), 0); err != nil {
			t.Fatal(err)
		}
		if err := a.Sync(); err != nil {
			t.Fatal(err)
		}
		az := fileZone(t, e, a)
		if rem := az.remaining(); rem != tail || rem >= e.cfg.FinishTail {
			t.Fatalf("a%d's zone has %d left (FinishTail %d): the test wants %d", i, rem, e.cfg.FinishTail, tail)
		}
		as, azs = append(as, a), append(azs, az)
	}
	// "b": 4 KiB writes, unsynced, until admission refuses one: all the
	// room there is, a's tail included, is promised to b's dirty data.
	b := mustCreate(t, e, "b")
	chunk := bytes.Repeat([]byte("b"), BlockSize)
	off := int64(0)
	for e.roomFor(writeCharge(off, BlockSize)) {
		if _, err := b.WriteAt(chunk, off); err != nil {
			t.Fatalf("b at %d: %v", off, err)
		}
		off += BlockSize
	}
	for i, az := range azs {
		if az.state.Load() != zoneOpen || az.remaining() != tail {
			t.Fatalf("a%d's zone changed while b wrote: state %d, %d left", i, az.state.Load(), az.remaining())
		}
	}
	// Their last closes finish their tails.
	before := e.Stats().ZonesTailFinished
	for _, a := range as {
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
	}
	finished := e.Stats().ZonesTailFinished - before
	t.Logf("b wrote %d bytes; tails finished at the a files' closes %d; dirty %d; space %d", off, finished, e.cache.DirtyBytes(), e.placer.space())
	// b's accepted writes must fit.
	if err := b.Sync(); err != nil {
		st := e.Stats()
		t.Fatalf("fsync of %d bytes admission accepted, after the a files' closes (tails finished %d): %v; free zones %d, dirty %d, gc resets %d",
			off, finished, err, st.FreeZones, st.DirtyBytes, st.GCResets)
	}
	st := e.Stats()
	t.Logf("after b's fsync: free zones %d (GC reserve %d), space %d, gc runs %d resets %d sealed %d, shared %d", st.FreeZones, e.cfg.GC.Reserve, e.placer.space(), st.GCRuns, st.GCResets, st.GCSealed, st.ZonesShared)
	got := readAll(t, e, "b")
	if int64(len(got)) != off || !bytes.Equal(got, bytes.Repeat([]byte("b"), int(off))) {
		t.Fatalf("b reads back %d bytes, want %d of b", len(got), off)
	}
}
