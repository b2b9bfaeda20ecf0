package engine

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// A namespace of empty files with long names fills a metadata half's
// allowance for checkpoints, then data written into those files adds
// extents the checkpoint must hold. Before the fix creates were bounded
// only by the log's room after the checkpoint of the moment, so the
// namespace took the room format set aside for extents, and once the
// files got data no checkpoint fit the half: the daemon refused to start
// ("checkpoint of 1073152 bytes does not fit a 1048576-byte metadata
// half"; red90, zonefold serve on emu zones=16 after kill -9), with every
// acknowledged byte on the device and fsck calling it clean. A create
// must get ENOSPC while the namespace could still crowd out the extents
// the data zones can call for, and the file system must reopen however
// its files then fill with fragmented data.
func TestNamespaceLeavesRoomForExtents(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	pad := strings.Repeat("x", MaxNameLen-9)
	var names []string
	for i := 0; ; i++ {
		name := fmt.Sprintf("%s%09d", pad, i)
		f, err := e.OpenFile(name, OCreate|ODeferSync)
		if err != nil {
			if !errors.Is(err, ErrNoSpace) {
				t.Fatalf("create %d: %v, want ENOSPC", i, err)
			}
			break
		}
		f.Close()
		names = append(names, name)
	}
	t.Logf("%d files created", len(names))
	// One extent per block: every other block of each file, synced.
	buf := make([]byte, BlockSize)
	full := false
	for _, name := range names {
		f, err := e.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		for b := 0; b < 64 && !full; b++ {
			if _, err := f.WriteAt(buf, int64(2*b)*BlockSize); err != nil {
				if !errors.Is(err, ErrNoSpace) {
					t.Fatalf("write %s block %d: %v", name, b, err)
				}
				full = true
			}
		}
		if err := f.Sync(); err != nil && !errors.Is(err, ErrNoSpace) {
			t.Fatalf("sync %s: %v", name, err)
		}
		f.Close()
		if full {
			break
		}
	}
	if err := e.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	e = reopen(t, devName, cfg)
	defer e.Close()
	if err := e.Remove(names[0]); err != nil {
		t.Fatalf("remove after reopen: %v", err)
	}
}

// A device an older zonefold left with a namespace whose checkpoint no
// longer fits a metadata half (the state TestNamespaceLeavesRoomForExtents
// now prevents) must still open: recovery's checkpoint does not fit, but
// nothing recovery decided needs one, so the file system opens on its log
// as it stands and serves every byte. Before, Open failed and the daemon
// refused to start on a device fsck called clean.
func TestOpenWithCheckpointThatDoesNotFit(t *testing.T) {
	devName, cfg, written := oversizeNamespaceDevice(t)
	e, err := Open(devName, cfg)
	if err != nil {
		t.Fatalf("open after a checkpoint stopped fitting: %v", err)
	}
	defer e.Close()
	got := make([]byte, BlockSize)
	for name, n := range written {
		f, err := e.Open(name)
		if err != nil {
			t.Fatalf("open %s: %v", name, err)
		}
		for b := 0; b < n; b++ {
			if _, err := f.ReadAt(got, int64(2*b)*BlockSize); err != nil {
				t.Fatalf("read %s block %d: %v", name, 2*b, err)
			}
			if got[0] != byte(b+1) {
				t.Fatalf("%s block %d: %d, want %d", name, 2*b, got[0], b+1)
			}
		}
		f.Close()
	}
}

// Halves of one zone, as zonefold formatted before halves were sized for
// the worst case, cannot hold a checkpoint with an extent on every data
// block for any namespace: the bound must not refuse every create there.
func TestNamespaceRoomOnOneZoneHalves(t *testing.T) {
	e := &Engine{byName: map[string]*file{}}
	e.sb = Superblock{ZoneSize: 1 << 20, ZoneCap: 1 << 20, Zones: 256, UsedZones: 256, MetaGroup: 1, MetaZones: [2]int{0, 1}}
	if err := e.nsRoomFor(nsEntryLen("a")); err != nil {
		t.Fatalf("create on one-zone halves: %v", err)
	}
	e.sb.MetaGroup = MetaZones(zns.Geometry{ZoneSize: 1 << 20, ZoneCap: 1 << 20, Zones: 256}) / 2
	if err := e.nsRoomFor(nsEntryLen("a")); err != nil {
		t.Fatalf("create on halves format sized: %v", err)
	}
	e.nsBytes = e.sb.metaHalfCap()
	if err := e.nsRoomFor(nsEntryLen("a")); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("create past the namespace's room: %v, want ENOSPC", err)
	}
}
