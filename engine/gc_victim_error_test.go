package engine

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// TestGCPassTriesTheNextVictimAfterOneFails: a writer short of space runs
// a GC pass; the device fails a read of the pass's first victim (a media
// error in one zone). The pass must go on to its next candidate, which
// frees room, and the write succeed: the other zones' garbage is as good
// as the failed one's. A pass that stopped at its first victim's error
// failed the write with EIO while another victim could free room; and a
// zone that failed every read, picked first every time (it holds the
// most garbage), kept every writer on a full device failing for good.
func TestGCPassTriesTheNextVictimAfterOneFails(t *testing.T) {
	e := writersGCOnly(t, 12, 2<<20)
	defer e.Close()
	const size = 100000
	names := fillWithFiles(t, e, size)
	// One file removed from each of two zones that keep other live
	// data: two victims worth collecting, neither empty (an empty zone
	// is reset without a read).
	removed := removeOneFromZones(t, e, names, 2)
	charge := writeCharge(0, size)
	cands := e.gc.pick(gcUrgent, e.admitGain())
	if removed < 2 || len(cands) < 2 || e.roomFor(charge) {
		t.Fatalf("set-up: %d files removed, %d victims worth collecting, room %v; want 2, >= 2, false",
			removed, len(cands), e.roomFor(charge))
	}
	f := mustCreate(t, e, "late")
	emuOf(t, e).FailRead(1) // the first victim's first read
	want := bytes.Repeat([]byte{0xa5}, size)
	if _, err := f.WriteAt(want, 0); err != nil {
		t.Fatalf("write on a full device with two victims, the first failing a read: %v", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, e, "late"); !bytes.Equal(got, want) {
		t.Fatalf("late: %d bytes read back, want the %d written", len(got), len(want))
	}
}

// removeOneFromZones removes, from each of up to most zones that hold
// the first block of two or more of names (in fill order), the first
// such file: garbage beside live data. It returns how many it removed.
func removeOneFromZones(t *testing.T, e *Engine, names []string, most int) int {
	t.Helper()
	byZone := map[int][]string{}
	var order []int
	for _, n := range names {
		z := e.zoneAt(devOf(t, e, n, 0).dev).idx
		if byZone[z] == nil {
			order = append(order, z)
		}
		byZone[z] = append(byZone[z], n)
	}
	removed := 0
	for _, z := range order {
		if len(byZone[z]) < 2 || removed == most {
			continue
		}
		if err := e.Remove(byZone[z][0]); err != nil {
			t.Fatal(err)
		}
		removed++
	}
	return removed
}

// fillWithFiles creates files of size bytes, each fsynced and closed,
// until the device refuses one with ENOSPC (that one is removed), and
// returns their names: nothing on the device is garbage.
func fillWithFiles(t *testing.T, e *Engine, size int) []string {
	names, _ := fillWithFilesKept(t, e, size, false)
	return names
}

// fillWithFilesKept is fillWithFiles; with keepOpen it leaves each file's
// handle open (a close finishes a short tail, which changes what GC sees)
// and returns the handles too.
func fillWithFilesKept(t *testing.T, e *Engine, size int, keepOpen bool) (names []string, open []*File) {
	t.Helper()
	for i := 0; ; i++ {
		if i == 200 {
			t.Fatal("the device took 200 files without filling")
		}
		name := fmt.Sprintf("f%03d", i)
		f := mustCreate(t, e, name)
		_, err := f.WriteAt(bytes.Repeat([]byte{byte(i)}, size), 0)
		if err == nil {
			err = f.Sync()
		}
		if err != nil {
			if !errors.Is(err, ErrNoSpace) {
				t.Fatalf("filling the device: %v, want ENOSPC", err)
			}
			f.Close() // a removed file's data stays while it is open
			if err := e.Remove(name); err != nil {
				t.Fatal(err)
			}
			break
		}
		if keepOpen {
			open = append(open, f)
		} else {
			f.Close()
		}
		names = append(names, name)
	}
	return names, open
}
