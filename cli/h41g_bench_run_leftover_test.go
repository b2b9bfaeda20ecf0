package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// bench run on an emu path that did not exist created the file, formatted
// it, and when it then refused the workload (files larger than the
// device) left the 17 MiB file behind: a command that fails leaves no emu
// file it created. One that succeeds keeps it (the user named it).
func TestBenchRunFailureRemovesTheEmuFileItCreated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev")
	dev := "emu:" + path + "?zone_size=1M&zones=16"
	var out, errb bytes.Buffer
	if code := Main([]string{"bench", "run", dev, "--files", "2", "--size", "40M"}, &out, &errb); code != 2 { // a usage error since h45d
		t.Fatalf("bench run of 80 MiB on 14 MiB: exit %d, %s", code, errb.String())
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("bench run failed, yet the emu file it created is there (%v)", err)
	}
	zonefold(t, "bench", "run", dev, "--size", "1M")
	if _, err := os.Lstat(path); err != nil {
		t.Errorf("bench run succeeded, and the emu file is gone: %v", err)
	}
}
