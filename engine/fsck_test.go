package engine

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

func fsckOf(t *testing.T, devName string) *FsckReport {
	t.Helper()
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	rep, err := Fsck(dev)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// Recovery finishes partly written zones beyond the open budget; their
// unwritten tails hold nothing and are not damage. fsck called them
// damaged while every file read back intact.
func TestFsckFinishedZoneTailIsNotDamage(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	e := formatOpen(t, devName, smallConfig())
	want := map[string][]byte{}
	for _, name := range []string{"a", "b", "c", "d"} {
		f, err := e.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		want[name] = bytes.Repeat([]byte(name), 300<<10)
		if _, err := f.WriteAt(want[name], 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	cfg := smallConfig()
	cfg.OpenZones = 1 // the other partly written zones are finished
	e = reopen(t, devName, cfg)
	for name, w := range want {
		if got := readAll(t, e, name); !bytes.Equal(got, w) {
			t.Fatalf("%s differs after reopen", name)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	rep := fsckOf(t, devName)
	if len(rep.Problems) > 0 {
		t.Fatalf("fsck calls finished zones' tails damage: %v", rep.Problems)
	}
	if len(rep.Notes) == 0 {
		t.Fatal("fsck notes no finished zone tail")
	}
}

// A corrupt record in the middle of a zone ends recovery's scan of it:
// the acknowledged record behind it is lost. fsck must say so (it said
// clean, calling the corrupt record a torn last write).
func TestFsckFindsLostAcknowledgedData(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	e := formatOpen(t, devName, smallConfig())
	f, _ := e.Create("a")
	for _, b := range []byte{1, 2} {
		if _, err := f.WriteAt(bytes.Repeat([]byte{b}, 64<<10), 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil { // acknowledged
			t.Fatal(err)
		}
	}
	emu := emuOf(t, e)
	// The first record is superseded; flip a byte of its data.
	var at int64 = -1
	for _, z := range e.zones {
		if z != nil && z.alloc.Load() > 0 {
			at = emu.FileOffset(z.start + BlockSize + 100)
			break
		}
	}
	e.crashForTest()
	emu.Close()
	path := strings.TrimPrefix(devName[:strings.IndexByte(devName, '?')], "emu:")
	fh, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.WriteAt([]byte{0xff}, at); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	rep := fsckOf(t, devName)
	found := false
	for _, p := range rep.Problems {
		found = found || strings.Contains(p, "acknowledged data would be lost")
	}
	if !found {
		t.Fatalf("fsck misses the acknowledged record recovery would lose: problems %v, notes %v", rep.Problems, rep.Notes)
	}
}

// A flipped byte in a record a file maps is damage, named as a checksum
// failure.
func TestFsckFindsCorruptMappedData(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	e := formatOpen(t, devName, smallConfig())
	f, _ := e.Create("a")
	if _, err := f.WriteAt(bytes.Repeat([]byte{7}, 64<<10), 0); err != nil {
		t.Fatal(err)
	}
	emu := emuOf(t, e)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	var at int64 = -1
	dev, _ := zns.Open(devName, zns.Options{})
	emu = dev.(*zns.Emu)
	at = emu.FileOffset(2*dev.Geometry().ZoneSize + BlockSize + 100)
	dev.Close()
	path := strings.TrimPrefix(devName[:strings.IndexByte(devName, '?')], "emu:")
	fh, _ := os.OpenFile(path, os.O_RDWR, 0)
	fh.WriteAt([]byte{0xfe}, at)
	fh.Close()
	rep := fsckOf(t, devName)
	if len(rep.Problems) == 0 || !strings.Contains(strings.Join(rep.Problems, "\n"), "checksum fails") {
		t.Fatalf("fsck of a flipped mapped byte: problems %v", rep.Problems)
	}
}
