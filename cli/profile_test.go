package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteProfileNamesItsFlag: a profile that cannot be written is
// reported under the flag that asked for it (the allocation profile's
// flag is --memprofile; its errors said --allocsprofile).
func TestWriteProfileNamesItsFlag(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "missing", "p.out")
	for _, tc := range []struct{ flag, profile string }{
		{"memprofile", "allocs"},
		{"blockprofile", "block"},
		{"mutexprofile", "mutex"},
	} {
		err := writeProfile(tc.flag, tc.profile, bad)
		if err == nil || !strings.HasPrefix(err.Error(), "--"+tc.flag+":") {
			t.Errorf("writing the %s profile to %s: %v, want an error that starts --%s:", tc.profile, bad, err, tc.flag)
		}
	}
}
