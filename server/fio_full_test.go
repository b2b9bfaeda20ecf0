package server_test

import (
	"bufio"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// metricValue is the value of the daemon's unlabelled metric name.
func (d *daemonProc) metricValue(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := http.Get(d.metrics)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no %s in the daemon's metrics", name)
	return 0
}

// TestFioFullDeviceFailsPromptly is the job found by hand: fio writes
// 1500 files of 4 KiB with fsync_on_close=1 to a daemon on 12 zones of
// 1 MiB. Each file's record takes a header block too, so about 1024 fit;
// the fsync at the close of each of the others fails with ENOSPC, and fio
// must end with that error. Before the fix each failing fsync ran GC
// passes that read, again, the zones GC had found not worth collecting,
// ~0.2 s a close here, and fio ran past its 120 s timeout: the "hang". A
// device that does not change between the failures must not be collected
// for each of them: the GC runs stay below the failed closes.
func TestFioFullDeviceFailsPromptly(t *testing.T) {
	_, engine := fioEnv(t)
	dir := t.TempDir()
	d := startServe(t, fmt.Sprintf("emu:%s?zone_size=1M&zones=12", filepath.Join(dir, "dev")), filepath.Join(dir, "zf.sock"))
	out, err := runFioWatched(t, d, "--name=full", "--ioengine=external:"+engine, "--sock="+d.socket,
		"--nrfiles=1500", "--filesize=4k", "--rw=write", "--bs=4k", "--fsync_on_close=1")
	if err == nil || !strings.Contains(out, "func=zonefold fsync, error=No space left on device") {
		t.Fatalf("fio on a full device: %v, want its fsync at close to fail with ENOSPC\n%s", err, out)
	}
	failed := strings.Count(out, "at close: No space left on device")
	runs := d.metricValue(t, "zonefold_gc_runs_total")
	t.Logf("%d fsyncs at close failed with ENOSPC; %v GC runs", failed, runs)
	if failed < 100 {
		t.Fatalf("only %d fsyncs at close failed: the device did not fill as this test needs\n%s", failed, out)
	}
	if runs >= float64(failed) {
		t.Fatalf("%v GC runs for %d failed fsyncs on a device that did not change between them", runs, failed)
	}
}
