package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestZoneNumbersPastTheDeviceAreUsageErrors: zones reset --zone 99 on a
// device of 16 zones exited 1 with the device's "zns: zone 99 of 16: out
// of range", and format --zones 100 with the engine's "format: 100 zones
// asked for; the device has 16": a flag's value past the device, which
// is a usage error (exit 2, the flag named), as --open-zones above the
// device is. An emu file the command would have created is not left.
func TestZoneNumbersPastTheDeviceAreUsageErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "dev")
	dev := "emu:" + path + "?zone_size=1M&zones=16"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"zones", "reset", dev, "--zone", "99"}, "--zone 99: the device has 16 zones (0 to 15)"},
		{[]string{"zones", "finish", dev, "--zone", "16"}, "--zone 16: the device has 16 zones (0 to 15)"},
		{[]string{"format", dev, "--zones", "100"}, "--zones 100: the device has 16 zones"},
	} {
		r := runBinary(t, c.args...)
		if r.status != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%s: exit %d, stderr %q; want 2 and %q", strings.Join(c.args, " "), r.status, r.stderr, c.want)
			continue
		}
		checkErrorLine(t, c.args, r.stderr)
		if _, err := os.Lstat(path); !os.IsNotExist(err) {
			t.Errorf("%s failed, yet left the emu file it created (%v)", strings.Join(c.args, " "), err)
		}
	}
	// The last zone and all of them are taken.
	zonefold(t, "zones", "finish", dev, "--zone", "15")
	zonefold(t, "format", dev, "--zones", "16", "--force")
}
