package server_test

// Probe 6 of the h26a hostile-clients review: fio at iodepth 256 with 8
// jobs, mixed random reads and writes on ONE shared file through the
// zonefold fio engine, then the same with every job over the whole file
// (overlapping), then SIGTERM, a restart and a verify of what the
// partitioned run wrote. No bug found; the test stays because it fails
// on mutants that matter:
//   - a daemon that mixes connections' buffers or handles (a job's
//     write landing with another job's data) fails the crc32c verify;
//   - a wedge at 8 x 256 outstanding requests fails the watchdog
//     (runFioWatched) and the overall cap;
//   - a shutdown that drops dirty data it acknowledged (no final
//     writeback) fails the verify_only after the restart.

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestH26aFioEightJobsQD256SharedFile(t *testing.T) {
	fioEnv(t)
	dir := t.TempDir()
	dev := fmt.Sprintf("emu:%s?zone_size=16M&zones=64", filepath.Join(dir, "dev"))
	sock := filepath.Join(dir, "zf.sock")
	d := startServe(t, dev, sock)
	_, engine := fioEnv(t)
	base := func(name string) []string {
		return []string{"--name=" + name, "--ioengine=external:" + engine, "--sock=" + d.socket,
			"--numjobs=8", "--iodepth=256", "--iodepth_batch_submit=64", "--iodepth_batch_complete_min=32",
			"--bs=4k", "--group_reporting=1"}
	}
	start := time.Now()
	// Each job its own 2 MiB of one 16 MiB file: random reads and
	// writes, then every written block read back and checked.
	verify := []string{"--verify=crc32c", "--verify_fatal=1", "--verify_state_save=0"}
	part := []string{"--filename=shared", "--size=2m", "--offset_increment=2m", "--rw=randrw", "--rwmixread=40"}
	out, err := runFioWatched(t, d, append(append(base("part"), part...), append(verify, "--do_verify=1")...)...)
	checkFio(t, "part", out, err, false)
	if !strings.Contains(out, "READ: bw=") || !strings.Contains(out, "WRITE: bw=") {
		t.Fatalf("fio part did not both read and write:\n%s", out)
	}
	// All eight over the same 8 MiB of another file, overlapping: no
	// verify is possible, but nothing may wedge or fail.
	out, err = runFioWatched(t, d, append(base("overlap"), "--filename=overlap", "--size=8m", "--rw=randrw",
		"--time_based=1", "--runtime=2s", "--norandommap=1")...)
	checkFio(t, "overlap", out, err, false)
	if d := time.Since(start); d > 3*time.Minute {
		t.Fatalf("fio at 8 x QD256 took %v", d)
	}
	// SIGTERM with the partitioned file's writes acknowledged but never
	// fsynced: a clean shutdown writes them back.
	d.stop()
	d = startServe(t, dev, sock) // --format formats only a blank device
	out, err = runFioWatched(t, d, append(append(base("part"), part...), append(verify, "--verify_only=1")...)...)
	checkFio(t, "part verify_only after SIGTERM and restart", out, err, false)
	if !strings.Contains(out, "READ: bw=") {
		t.Fatalf("fio verify_only read nothing:\n%s", out)
	}
	d.stop()
}
