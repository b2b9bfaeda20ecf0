package zns

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// A file or block device too small for the geometry given can never
// open as it: a block device does not grow, and Existing (fsck) never
// grows a file. Open read it all the same before it said so: the check
// for a blank file or a lost table (checkLostTable) read the whole of a
// device of zeros, only to refuse it for its size after. It now checks
// the size first and reads nothing past the header.

// smallGeo needs 1 MiB + 16 zones of 16 MiB: far more than smallSize.
const (
	smallGeo  = "?zone_size=16M&zones=16"
	smallSize = 32 << 20
)

// zerosFile makes a file of n written zeros (every block allocated,
// as dd leaves it): the blank check reads every byte of it.
func zerosFile(t *testing.T, n int64) string {
	t.Helper()
	p := sparseFile(t, 0)
	patchFile(t, p, 0, make([]byte, n))
	return p
}

// tooSmall opens dev (the file at path, or a loop device of it) with
// smallGeo and opts, which must fail naming want without reading more
// than the header area, and leave the file as it was.
func tooSmall(t *testing.T, dev, path string, opts Options, want ...string) {
	t.Helper()
	err := refusedOpenOf(t, dev, path, smallGeo, opts, 1<<20)
	for _, w := range append(want, "needs 269484032") {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
	if strings.Contains(err.Error(), "format=1") {
		t.Errorf("error %q advises format=1, which does not make the device bigger", err)
	}
}

func TestEmuTooSmallFileIsRefusedBeforeItIsRead(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"fsck", Options{Existing: true}},
		{"fsck-copy-to", Options{Existing: true, InferLostTable: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := zerosFile(t, smallSize)
			tooSmall(t, p, p, tc.opts, "the file has 33554432 bytes", "zone_size and zones")
		})
	}
}

func TestEmuTooSmallBlockDeviceIsRefusedBeforeItIsRead(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true: this test needs root (losetup)")
		}
		t.Skip("needs root to attach a loop device (losetup)")
	}
	backing := zerosFile(t, smallSize)
	out, err := exec.Command("losetup", "--find", "--show", backing).CombinedOutput()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("losetup: %v: %s", err, out)
		}
		t.Skipf("losetup: %v: %s", err, out)
	}
	loop := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "--detach", loop).CombinedOutput(); err != nil {
			t.Errorf("losetup --detach %s: %v: %s", loop, err, out)
		}
	})
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"open", Options{}},
		{"format-force", Options{ReplaceLostTable: true}},
		{"fsck", Options{Existing: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tooSmall(t, loop, backing, tc.opts, "the device has 33554432 bytes")
		})
	}
	// format=1 is refused too, and writes nothing.
	d, err := Open("emu:"+loop+smallGeo+"&format=1", Options{})
	if err == nil {
		d.Close()
		t.Fatal("format=1 of a device too small for its geometry succeeded")
	}
	if !strings.Contains(err.Error(), "the device has 33554432 bytes") {
		t.Errorf("format=1: %v, want the device's size named", err)
	}
	if errors.Is(err, ErrLostZoneTable) {
		t.Errorf("format=1: %v, is not a lost table", err)
	}
}
