package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestFormatSaysWhatTheDeviceHolds: format of a device formatted already
// said "engine: zone 0 is not empty: the device holds data (--force
// erases it)": the user had to guess that the data was their file system
// and whether serve would take it as it is. It now names a zonefold file
// system by its uuid and gives both ways on; other data it calls that,
// naming the zone. Neither refusal changes the device.
func TestFormatSaysWhatTheDeviceHolds(t *testing.T) {
	dev := "emu:" + filepath.Join(t.TempDir(), "dev") + "?zone_size=1M&zones=16"
	zonefold(t, "format", dev)
	uuid := strings.Fields(strings.SplitN(zonefold(t, "format", dev, "--force"), "uuid ", 2)[1])[0]
	uuid = strings.TrimSuffix(uuid, ",")
	r := runBinary(t, "format", dev)
	for _, want := range []string{
		dev + " holds a zonefold file system (uuid " + uuid + "), formatted already",
		"`zonefold serve DEVICE` serves it as it is",
		"`zonefold format --force DEVICE` erases it and its files",
	} {
		if r.status != 1 || !strings.Contains(r.stderr, want) {
			t.Errorf("format of a formatted device: exit %d, stderr %q; want 1 and %q", r.status, r.stderr, want)
		}
	}
	checkErrorLine(t, []string{"format", dev}, r.stderr)
	if strings.Contains(r.stderr, "zone 0 is not empty") {
		t.Errorf("format of a formatted device still says %q", r.stderr)
	}
	// Not a file system: a zone written (finished) by other means.
	zonefold(t, "zones", "reset", dev, "--all", "--force")
	zonefold(t, "zones", "finish", dev, "--zone", "3")
	r = runBinary(t, "format", dev)
	if want := "holds data that is not a zonefold file system (zone 3 is not empty): `zonefold format --force DEVICE` erases it"; r.status != 1 || !strings.Contains(r.stderr, want) {
		t.Errorf("format of a device with other data: exit %d, stderr %q; want 1 and %q", r.status, r.stderr, want)
	}
	if out := zonefold(t, "zones", "report", dev); !strings.Contains(out, "full") {
		t.Errorf("a refused format changed the device:\n%s", out)
	}
}
