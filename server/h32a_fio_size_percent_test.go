package server_test

import (
	"strings"
	"testing"
)

// TestH32aFioSizePercentOfAMissingFile: size=50% is a share of the
// file's size; of a file that does not exist fio can make nothing (on a
// kernel file system it fails the job with EINVAL). The engine refused
// such a job saying it "gives neither size= nor filesize=", which it
// did give: the message now names the percentage and what it needs.
func TestH32aFioSizePercentOfAMissingFile(t *testing.T) {
	_, engine := fioEnv(t)
	d := newServe(t)
	out, err := runFioWatched(t, d, "--name=pct", "--ioengine=external:"+engine, "--sock="+d.socket,
		"--filename=pct-missing", "--rw=randwrite", "--bs=4k", "--size=50%")
	if err == nil {
		t.Fatalf("fio size=50%% of a missing file ran:\n%s", out)
	}
	if strings.Contains(out, "neither size=") || !strings.Contains(out, "zonefold: pct-missing does not exist, and size=50% is a share of an existing file's size") {
		t.Fatalf("fio size=50%% of a missing file: not refused naming size=50%%:\n%s", out)
	}
	d.stop()
}
