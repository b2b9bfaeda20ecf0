package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Plain fsck reads at most 64 MiB of the data of an emu file whose
// header slots read as zeros (zns's fsckScanBudget) before it gives up
// on telling what the file is. A zonefold device whose first 72 MiB of
// data are its conventional zones (the engine writes none), every block
// of them allocated (a copy made with cp --sparse=never, a block
// device), and whose first metadata half lost its superblock with the
// header (a larger dd) is still a device that lost its zone table, for
// the superblock that starts its second metadata zone: plain fsck says
// so, and fsck --copy-to copies every file off byte for byte.
func TestLostZoneTableOfADeviceWhoseDataStartsPastTheFsckBudget(t *testing.T) {
	path, devName, e := copyToDeviceWith(t, "zone_size=8M&zones=16&conv=9")
	want := map[string][]byte{}
	for i, n := range []int{1, 4095, 4096, 100 << 10, 3 << 20} {
		name := fmt.Sprintf("f%d", i)
		want[name] = bytes.Repeat([]byte{byte('a' + i)}, n)
		copyToWrite(t, e, name, want[name])
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	// The header and the conventional zones written as zeros, and the
	// first metadata zone's superblock block with them.
	const metaZone0 = 1<<20 + 9*8<<20
	fh, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = fh.WriteAt(make([]byte, metaZone0+4096), 0)
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	code, out := copyToRun("fsck", devName)
	if code != exitNotChecked || !strings.Contains(out, "its zone table is lost") || !strings.Contains(out, "a zonefold superblock starts zone 10") {
		t.Fatalf("plain fsck: exit %d, want %d and a lost zone table, for the superblock that starts zone 10:\n%s", code, exitNotChecked, out)
	}
	dir := filepath.Join(t.TempDir(), "copy")
	code, out = copyToRun("fsck", devName, "--copy-to", dir)
	if code != exitDamaged || !strings.Contains(out, fmt.Sprintf("copied %d files", len(want))) {
		t.Fatalf("fsck --copy-to: exit %d, want %d and every file copied:\n%s", code, exitDamaged, out)
	}
	for name, w := range want {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(got, w) {
			t.Errorf("copy of %s: %d bytes, err %v; want its %d bytes", name, len(got), err, len(w))
		}
	}
}
