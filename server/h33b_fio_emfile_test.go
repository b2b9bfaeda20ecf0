package server_test

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestH33bFioOutOfDescriptorsForTheRegionSaysSo: fio run with each
// descriptor limit from too few to enough. At the one where its job's
// socket fits but the region's memfd the daemon passes it does not (the
// kernel drops it, MSG_CTRUNC), the engine said "the daemon's hello
// reply does not describe the region asked for" (EPROTO), blaming the
// daemon. It must say this process is out of file descriptors.
func TestH33bFioOutOfDescriptorsForTheRegionSaysSo(t *testing.T) {
	d := newServe(t)
	fio, engine := fioEnv(t)
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skipf("no prlimit: %v", err)
	}
	saw := false
	for n := 4; n <= 64; n++ {
		cmd := exec.Command(prlimit, "--nofile="+strconv.Itoa(n), fio, "--name=emfile", "--filename=emfile",
			"--rw=write", "--bs=4k", "--size=64k", "--ioengine=external:"+engine, "--sock="+d.socket)
		cmd.Dir = t.TempDir()
		out, err := cmd.CombinedOutput()
		if strings.Contains(string(out), "does not describe the region") {
			t.Fatalf("fio with %d descriptors blames the daemon:\n%s", n, out)
		}
		if strings.Contains(string(out), "out of file descriptors") {
			saw = true
		}
		if err == nil {
			break
		}
	}
	if !saw {
		t.Fatal("no descriptor limit from 4 to 64 left fio its socket but not its region, or fio never said it was out of descriptors there")
	}
	d.stop()
}
