package server_test

import (
	"bufio"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// metricValue is the value of the daemon's unlabelled metric name.
func (d *daemonProc) metricValue(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := metricsClient.Get(d.metrics)
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
// 1 MiB. Each file's record takes a header block too, so about 1016 fit.
// fio must end promptly with ENOSPC, from the write that did not fit (as
// a kernel file system with delayed allocation answers), after filling
// the device: no fsync at a close may fail, since every write accepted
// fits. (Once, admission counted data and not headers: the excess failed
// at the fsyncs of the closes, and each failing fsync ran GC passes that
// read, again, the zones GC had found not worth collecting, ~0.2 s a
// close here, so that fio ran past its 120 s timeout: the "hang".)
func TestFioFullDeviceFailsPromptly(t *testing.T) {
	_, engine := fioEnv(t)
	dir := t.TempDir()
	d := startServe(t, fmt.Sprintf("emu:%s?zone_size=1M&zones=12", filepath.Join(dir, "dev")), filepath.Join(dir, "zf.sock"))
	out, err := runFioWatched(t, d, "--name=full", "--ioengine=external:"+engine, "--sock="+d.socket,
		"--nrfiles=1500", "--filesize=4k", "--rw=write", "--bs=4k", "--fsync_on_close=1")
	if err == nil || !strings.Contains(out, "error=No space left on device") {
		t.Fatalf("fio on a full device: %v, want it to fail with ENOSPC\n%s", err, out)
	}
	if n := strings.Count(out, "at close: No space left on device"); n > 0 {
		t.Fatalf("%d fsyncs at close failed with ENOSPC: writes were accepted that could not fit\n%s", n, out)
	}
	m := regexp.MustCompile(`issued rwts: total=0,(\d+),`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no issued writes in fio's output\n%s", out)
	}
	written, _ := strconv.Atoi(m[1])
	t.Logf("%d writes issued", written)
	if written < 1000 {
		t.Fatalf("fio failed after %d writes of 4 KiB: the device refused writes long before it was full\n%s", written, out)
	}
}
