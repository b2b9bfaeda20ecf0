package engine

import (
	"bytes"
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// TestRecoveryGoesOnPastADataBlockThatFailsToRead: a data block of a
// record newer than the checkpoint no longer reads (media damage that
// stays; its header reads). Recovery replays the record all the same, as
// it does one whose block fails its checksum, and the file system opens:
// the other file reads, the damaged block's read fails with EIO, the
// file's other blocks read, and fsck reports the block. Before, every
// Open failed on the scan's read of the record's data, so no file was
// reachable at all.
func TestRecoveryGoesOnPastADataBlockThatFailsToRead(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	a, b := pattern(64<<10, 1), pattern(64<<10, 2)
	createSynced(t, e, "a", a).Close()
	createSynced(t, e, "b", b).Close()
	x := devOf(t, e, "a", 8192)
	blk := x.dev + 8192 - x.off
	if blk < x.hdr+BlockSize {
		t.Fatalf("set-up: block at %d is not past its header at %d", blk, x.hdr)
	}
	emu := emuOf(t, e)
	e.crashForTest()
	if err := emu.PowerCut(); err != nil {
		t.Fatal(err)
	}
	emu.Close()

	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	bz := &badZones{Device: dev, bad: map[int]bool{}, ranges: [][2]int64{{blk, blk + BlockSize}}}
	e, err = OpenDevice(bz, cfg)
	if err != nil {
		dev.Close()
		t.Fatalf("open with one data block unreadable: %v", err)
	}
	if got := readAll(t, e, "b"); !bytes.Equal(got, b) {
		t.Fatal("b differs")
	}
	f, err := e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, BlockSize)
	if _, err := f.ReadAt(buf, 8192); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read of the unreadable block: %v, want EIO", err)
	}
	for _, off := range []int64{0, 4096, 12288, 60 << 10} {
		if n, err := f.ReadAt(buf, off); n != len(buf) || err != nil || !bytes.Equal(buf, a[off:off+BlockSize]) {
			t.Fatalf("read of a's block at %d: %d, %v", off, n, err)
		}
	}
	f.Close()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	dev, err = zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	bz.Device = dev
	rep, err := Fsck(bz)
	if err != nil {
		t.Fatalf("fsck: %v", err)
	}
	if len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], `"a"`) {
		t.Fatalf("fsck: problems %q, want one about a's unreadable block", rep.Problems)
	}
	t.Logf("fsck: %q", rep.Problems)
}
