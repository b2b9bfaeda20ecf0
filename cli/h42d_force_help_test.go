package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// The benches' --force help said they refuse a DEVICE holding "a
// zonefold file system with files, or anything written", but a freshly
// formatted device without a file is refused too (bench.CheckErasable
// refuses any written zone; README says "even an empty one just
// formatted"): a user who formatted a device for the bench, read the
// help, and ran it without --force was refused.
func TestBenchForceHelpSaysAnEmptyFileSystemIsRefused(t *testing.T) {
	dev := "emu:" + filepath.Join(t.TempDir(), "dev") + "?zone_size=1M&zones=16"
	zonefold(t, "format", dev)
	if r := runBinary(t, "bench", "run", dev, "--size", "1M"); r.status != 1 || !strings.Contains(r.stderr, "--force") {
		t.Fatalf("bench run on a freshly formatted device without --force: exit %d, %q; want 1 and --force named", r.status, r.stderr)
	}
	for _, cmd := range [][]string{{"bench", "run"}, {"bench", "fio"}, {"bench", "gc"}, {"bench", "lsm"}, {"bench", "seeds"}} {
		r := runBinary(t, append(cmd, "--help")...)
		help := strings.Join(strings.Fields(r.stdout), " ")
		if strings.Contains(help, "file system with files") || !strings.Contains(help, "even an empty one") {
			t.Errorf("%s --help's --force: %q; want it to say an empty file system is refused too", strings.Join(cmd, " "), flagLine(help, "--force"))
		}
	}
}

// flagLine is the text of help from flag's entry to the next flag's.
func flagLine(help, flag string) string {
	_, rest, _ := strings.Cut(help, flag+" ")
	line, _, _ := strings.Cut(rest, " --")
	return line
}
