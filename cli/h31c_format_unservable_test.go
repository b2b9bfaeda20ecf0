package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFormatRefusesADeviceServeCannotUse: format wrote a file system to
// devices that serve then refused (an emu device made with max_open=1:
// "formatted ...", then serve's "device allows 1 open zones; zonefold
// needs at least 3"), and on a block size above 4 KiB it reset every
// zone first and then failed with an internal "write of 8192 bytes at 0
// ... not block aligned". Format now refuses both up front, saying why,
// and writes nothing: a device that already held data keeps it.
func TestFormatRefusesADeviceServeCannotUse(t *testing.T) {
	for _, c := range []struct{ geo, want string }{
		{"zone_size=1M&zones=16&max_open=1", "device allows 1 open zones; zonefold needs at least 3"},
		{"zone_size=1M&zones=16&max_active=2", "device allows 2 open zones; zonefold needs at least 3"},
		{"zone_size=1M&zones=16&block_size=16K", "device block size 16384: zonefold needs one that divides 4096"},
		{"zone_size=1M&zones=16&block_size=8K", "device block size 8192: zonefold needs one that divides 4096"},
	} {
		t.Run(c.geo, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "dev")
			args := []string{"format", "emu:" + path + "?" + c.geo}
			r := runBinary(t, args...)
			if r.status != 1 || !strings.Contains(r.stderr, c.want) {
				t.Fatalf("%v: status %d, stderr %q; want 1 and %q", args, r.status, r.stderr, c.want)
			}
			checkErrorLine(t, args, r.stderr)
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Errorf("%v failed but left %s behind (%v)", args, path, err)
			}
		})
	}
}
