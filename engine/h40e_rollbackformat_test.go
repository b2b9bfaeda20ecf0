package engine

import (
	"strings"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

type h40eAppended chan error

func (c h40eAppended) Appended(_ int64, err error) { c <- err }

// TestH40eRollbackNotReportedAfterFormat: an emu device whose last
// flush's data no longer matches its checksums opens taken back
// (zns.RollbackReporter), here one with no file system on it yet (a
// power cut during the flush of a first format). serve --format then
// formats it and opens the engine on the same device: the rollback, of
// data the format erased and whose table its flush rewrote, was
// reported by that engine's recovery as loss of fsynced file data, on a
// new, empty file system. A rollback a flush since has settled is no
// longer the device's to report.
func TestH40eRollbackNotReportedAfterFormat(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	path := strings.TrimPrefix(devName, "emu:")
	path = path[:strings.IndexByte(path, '?')]
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	emu := dev.(*zns.Emu)
	rep := make([]zns.Zone, 16)
	if _, err := dev.Report(0, rep); err != nil {
		t.Fatal(err)
	}
	zone := -1
	for i, z := range rep {
		if z.Type != zns.TypeConventional {
			zone = i
			break
		}
	}
	buf := make([]byte, 64<<10)
	for i := range buf {
		buf[i] = byte(i)
	}
	for range 2 {
		done := make(h40eAppended, 1)
		if err := dev.Append(zone, [][]byte{buf}, done); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if err := dev.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	at := emu.FileOffset(rep[zone].Start + 64<<10 + 100)
	dev.Close()
	h39cPatch(t, path, at, func(b []byte) { b[0] ^= 1 })

	dev, err = zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r := dev.(zns.RollbackReporter).Rollbacks(); len(r) == 0 {
		dev.Close()
		t.Fatal("set-up: the device took nothing back")
	}
	if _, err := Format(dev, FormatOptions{Force: true}); err != nil {
		dev.Close()
		t.Fatal(err)
	}
	e, err := OpenDevice(dev, smallConfig())
	if err != nil {
		dev.Close()
		t.Fatal(err)
	}
	defer e.Close()
	if h40bRollbackReported(e.damage) {
		t.Fatalf("a freshly formatted file system reports fsynced data lost: %q", e.damage)
	}
}
