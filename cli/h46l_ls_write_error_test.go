package cli

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestH46lLsReportsAFailedWrite: `zonefold ls > /dev/full` (a full disk,
// a closed pipe's EIO) exited 0 having listed nothing, so a script's
// `zonefold ls > list` took an empty list for an empty file system;
// ls -l, ls --json and stat already exited 1. Plain ls does too now.
func TestH46lLsReportsAFailedWrite(t *testing.T) {
	sock, c, _ := newDaemon(t)
	createEmpty(t, c, "f")
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()
	for _, args := range [][]string{{"ls"}, {"ls", "-l"}, {"ls", "--json"}} {
		var errb bytes.Buffer
		code := Main(append(args, "--socket", sock), full, &errb)
		if code != 1 || !strings.Contains(errb.String(), "no space left on device") {
			t.Errorf("zonefold %s > /dev/full: exit %d, stderr %q; want exit 1 saying the write failed", strings.Join(args, " "), code, errb.String())
		}
	}
}
