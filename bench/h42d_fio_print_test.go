package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// bench fio's heading printed "bs=131072" and "end_fsync=false": the
// block size in bytes, where every size the CLI prints is in KiB/MiB/GiB.
// --json keeps bs in bytes.
func TestFioBenchPrintsHumanBlockSize(t *testing.T) {
	w := Workload{Files: 1, BS: 128 << 10, IODepth: 16, Size: 256 << 20, RW: "write", EndFsync: true}
	r := fioBenchResult{Bytes: 256 << 20, Elapsed: time.Second}
	var out bytes.Buffer
	if err := printFioBench(&out, false, w, 3, r, r); err != nil {
		t.Fatal(err)
	}
	head, _, _ := strings.Cut(out.String(), "\n")
	if want := "1 file x 256 MiB, write, bs 128 KiB, iodepth 16, fsync at the end, 3 alternating rounds"; head != want {
		t.Errorf("heading %q; want %q", head, want)
	}
	out.Reset()
	if err := printFioBench(&out, true, w, 3, r, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"bs": 131072`) {
		t.Errorf("--json: bs not in bytes:\n%s", out.String())
	}
}
