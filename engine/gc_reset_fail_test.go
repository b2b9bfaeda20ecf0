package engine

import (
	"bytes"
	"fmt"
	"testing"
)

// TestZoneThatCannotResetDoesNotFailEveryWriter: a full zone holding no
// valid data goes read-only on the device (media failure: it reads, but
// refuses a reset). Writers on a full device must still get room from the
// other zones' garbage, write after write: a GC pass that began with the
// empty zones' resets and returned their failure never got to any other
// victim, and every write failed with EIO for as long as the daemon ran.
func TestZoneThatCannotResetDoesNotFailEveryWriter(t *testing.T) {
	e := writersGCOnly(t, 12, 2<<20)
	defer e.Close()
	const size = 100000
	names := fillWithFiles(t, e, size)
	byZone := map[*zone][]string{}
	var order []*zone
	for _, n := range names {
		z := e.zoneAt(devOf(t, e, n, 0).dev)
		if byZone[z] == nil {
			order = append(order, z)
		}
		byZone[z] = append(byZone[z], n)
	}
	// The first full zone is emptied and goes read-only; the others
	// each lose one of their files: garbage worth collecting.
	var dead *zone
	others := 0
	for _, z := range order {
		if z.state.Load() != zoneFull || len(byZone[z]) < 2 {
			continue
		}
		rm := byZone[z][:1]
		if dead == nil {
			dead, rm = z, byZone[z]
		} else {
			others++
		}
		for _, n := range rm {
			if err := e.Remove(n); err != nil {
				t.Fatal(err)
			}
		}
	}
	if dead == nil || others < 2 || dead.valid.Load() != 0 {
		t.Fatalf("set-up: dead zone %v, %d other zones with garbage", dead, others)
	}
	if err := emuOf(t, e).ZoneReadOnly(dead.idx); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		name := fmt.Sprintf("late%d", i)
		f := mustCreate(t, e, name)
		want := bytes.Repeat([]byte{byte(0xa0 + i)}, size)
		if _, err := f.WriteAt(want, 0); err != nil {
			t.Fatalf("write %d on a full device with garbage beside a zone that cannot reset: %v", i+1, err)
		}
		if err := f.Sync(); err != nil {
			t.Fatalf("fsync %d: %v", i+1, err)
		}
		if got := readAll(t, e, name); !bytes.Equal(got, want) {
			t.Fatalf("%s: %d bytes read back, want the %d written", name, len(got), len(want))
		}
	}
}
