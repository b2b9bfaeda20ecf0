package server

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDeviceClaimHoldsAcrossDeviceNodes: the device claim was a flock on
// the device node's inode, so a second node of the same block device
// (mknod, a container's own /dev) was a second claim: `serve
// emu:/tmp/alias` ran beside `serve emu:/dev/loop0` on the same loop
// device, and `format --force emu:/tmp/alias` erased it under the first
// daemon. The claim now holds the device, whichever node names it.
func TestDeviceClaimHoldsAcrossDeviceNodes(t *testing.T) {
	ents, err := os.ReadDir("/sys/dev/block")
	if err != nil || len(ents) == 0 {
		t.Skipf("no block devices in sysfs: %v", err)
	}
	var major, minor uint32
	if _, err := fmtSscanDev(ents[0].Name(), &major, &minor); err != nil {
		t.Skipf("sysfs block entry %q: %v", ents[0].Name(), err)
	}
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	for _, p := range []string{a, b} {
		if err := unix.Mknod(p, unix.S_IFBLK|0o600, int(unix.Mkdev(major, minor))); err != nil {
			t.Skipf("mknod a block device node: %v", err)
		}
	}
	if f, err := os.OpenFile(a, os.O_RDONLY|unix.O_NONBLOCK, 0); err != nil {
		t.Skipf("open a device node here (a nodev mount?): %v", err)
	} else {
		f.Close()
	}
	for _, spec := range [][2]string{{a, b}, {"emu:" + a, "emu:" + b}, {a, "emu:" + b}} {
		first, err := LockDevice(spec[0])
		if err != nil {
			t.Fatalf("claim %s: %v", spec[0], err)
		}
		second, err := LockDevice(spec[1])
		if err == nil {
			second.Release()
			first.Release()
			t.Fatalf("%s was claimed while %s, a node of the same device, was held", spec[1], spec[0])
		}
		if !strings.Contains(err.Error(), "in use") {
			t.Errorf("claim of %s beside %s: %v", spec[1], spec[0], err)
		}
		first.Release()
		second, err = LockDevice(spec[1])
		if err != nil {
			t.Fatalf("claim of %s once %s was released: %v", spec[1], spec[0], err)
		}
		second.Release()
	}
}

// fmtSscanDev parses a sysfs "MAJOR:MINOR" name.
func fmtSscanDev(name string, major, minor *uint32) (int, error) {
	return fmt.Sscanf(name, "%d:%d", major, minor)
}
