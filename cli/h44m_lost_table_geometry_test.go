package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zonefold/zonefold/engine"
)

// fsck --copy-to of an emu file whose zone table is lost takes the
// geometry from the device string alone. Given one the device was not
// formatted with (conv omitted, conv too large, another zone_size), it
// said "superblock names metadata zones [2 3], the device's are [0 1]"
// or "device is not formatted by zonefold (run `zonefold format
// DEVICE`)": no word of the geometry, and advice that erases the device.
// Now it says the geometry given may not be the device's, names the
// parameter to check, never advises format, and writes nothing; the
// right geometry copies the file.
func TestLostZoneTableWrongGeometryNamesTheParameter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev")
	devName := func(q string) string { return "emu:" + path + "?" + q }
	right := "zone_size=1M&zones=16&conv=2"
	if code, out := copyToRun("format", devName(right)); code != 0 {
		t.Fatalf("format: %d %s", code, out)
	}
	e, err := engine.Open(devName(right), engine.Config{CacheBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("lost geometry"), 3000)
	copyToWrite(t, e, "f", data)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	loseZoneTable(t, path)
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ query, want string }{
		{"zone_size=1M&zones=16", "conv=2"},
		{"zone_size=1M&zones=16&conv=3", "conv=2"},
		{"zone_size=1M&zones=16&conv=1", "conv=2"},
		{"zone_size=1M&zones=16&conv=4", "conv=2"},
		{"zone_size=1M&zones=16&conv=9", "conv=2"},
		{"zone_size=1M&zones=15&conv=2", "zones=16"},
		{"zone_size=512K&zones=16&conv=2", "zone_size=1048576"},
		// No superblock at any zone start: which parameters to check.
		{"zone_size=4M&zones=3", "check conv (the conventional zones before the metadata zones) and zone_size"},
	} {
		dir := filepath.Join(t.TempDir(), "copy")
		code, out := copyToRun("fsck", devName(tc.query), "--copy-to", dir)
		if code != exitNotChecked {
			t.Errorf("%s: exit %d, want %d\n%s", tc.query, code, exitNotChecked, out)
		}
		for _, w := range []string{"may not be the one the device was formatted with", tc.want} {
			if !strings.Contains(out, w) {
				t.Errorf("%s: the refusal does not say %q:\n%s", tc.query, w, out)
			}
		}
		if strings.Contains(out, "zonefold format") || strings.Contains(out, "format=1") {
			t.Errorf("%s: the refusal advises a format, which erases the device:\n%s", tc.query, out)
		}
		t.Logf("%s: %s", tc.query, out)
		if after, err := os.ReadFile(path); err != nil || !bytes.Equal(after, before) {
			t.Fatalf("%s: the device changed (%v)", tc.query, err)
		}
	}
	dir := filepath.Join(t.TempDir(), "copy")
	code, out := copyToRun("fsck", devName(right), "--copy-to", dir)
	got, err := os.ReadFile(filepath.Join(dir, "f"))
	if code != exitDamaged || err != nil || !bytes.Equal(got, data) {
		t.Errorf("%s: exit %d, copy of f %d bytes (%v), want %d\n%s", right, code, len(got), err, len(data), out)
	}
}

// loseZoneTable zeros both header slots of the 16-zone emu file at path:
// its zone table is lost, its zones' data left as it is.
func loseZoneTable(t *testing.T, path string) {
	t.Helper()
	fh, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = fh.WriteAt(make([]byte, 2*4096), 0) // both slots of 16 zones
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}
