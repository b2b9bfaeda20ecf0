package engine

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// fsckOf is fsck of the device devName names (closed), failing the test
// if fsck cannot run; its report's problems are the caller's to judge.
func fsckOf(t *testing.T, devName string) *FsckReport {
	t.Helper()
	return fsckOfWith(t, devName, FsckOptions{})
}

// fsckOfWith is fsckOf with options (zonefold fsck --accept-...).
func fsckOfWith(t *testing.T, devName string, opts FsckOptions) *FsckReport {
	t.Helper()
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	rep, err := FsckWith(dev, opts)
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

// A record newer than the checkpoint that recovery does not find is
// acknowledged data lost: fsck, walking every zone from its start, must
// say so. The checkpoint is made to claim the zone's record was in it
// already, as a recovery bug starting that zone's scan too late would.
func TestFsckFindsLostAcknowledgedData(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	e := formatOpen(t, devName, smallConfig())
	f, _ := e.Create("a")
	if _, err := f.WriteAt(bytes.Repeat([]byte{1}, 64<<10), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil { // acknowledged
		t.Fatal(err)
	}
	z := f.f.mru.Load()
	wp := z.alloc.Load()
	mz := e.sb.MetaZones[e.meta.active]
	e.crashForTest()
	emuOf(t, e).Close()
	rep := fsckOf(t, devName)
	if len(rep.Problems) > 0 {
		t.Fatalf("fsck before the damage: %v", rep.Problems)
	}
	// Rewrite the active checkpoint (the first record after the
	// superblock copy) with the data zone at its capacity.
	path := strings.TrimPrefix(devName[:strings.IndexByte(devName, '?')], "emu:")
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	at := dev.(*zns.Emu).FileOffset(int64(mz)*dev.Geometry().ZoneSize + BlockSize)
	dev.Close()
	fh, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	hb := make([]byte, BlockSize)
	if _, err := fh.ReadAt(hb, at); err != nil {
		t.Fatal(err)
	}
	h, err := decodeMetaHeader(hb)
	if err != nil || h.kind != metaCheckpoint {
		t.Fatalf("no checkpoint at the start of metadata zone %d: %v", mz, err)
	}
	rec := make([]byte, metaRecordLen(h.length))
	if _, err := fh.ReadAt(rec, at); err != nil {
		t.Fatal(err)
	}
	payload, err := verifyMeta(rec, h)
	if err != nil {
		t.Fatal(err)
	}
	c, err := decodeCheckpoint(payload)
	if err != nil {
		t.Fatal(err)
	}
	c.zoneWP[z.idx] = wp
	encodeMeta(rec, h.fs, metaCheckpoint, h.seq, encodeCheckpoint(c))
	if _, err := fh.WriteAt(rec, at); err != nil {
		t.Fatal(err)
	}
	rep = fsckOf(t, devName)
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
