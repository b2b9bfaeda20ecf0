package server_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// fio's direct=1 asks for I/O that bypasses the page cache; zonefold has
// no such path (every write goes through its cache), so a job that asks
// runs as any other and the engine says once per job, not once per
// clone, that the option has no effect and what makes data durable. A
// user reading a direct=1 result as the device's speed is told why not.
func TestFioSaysDirectHasNoEffect(t *testing.T) {
	fio, engine := fioEnv(t)
	d := newServe(t)
	const notice = "zonefold: direct=1 has no effect"
	for _, tc := range []struct {
		direct string
		want   int
	}{{"1", 1}, {"0", 0}} {
		cmd := exec.Command(fio, "--name=direct", "--ioengine=external:"+engine, "--sock="+d.socket,
			"--filename_format=direct"+tc.direct+".$jobnum", "--numjobs=3", "--rw=write", "--bs=4k",
			"--size=256k", "--verify=crc32c", "--direct="+tc.direct)
		cmd.Dir = t.TempDir()
		cmd.Env = os.Environ()
		out, err := cmd.CombinedOutput()
		checkFio(t, "direct="+tc.direct, string(out), err, false)
		if n := strings.Count(string(out), notice); n != tc.want {
			t.Errorf("direct=%s: the notice %d times, want %d:\n%s", tc.direct, n, tc.want, out)
		}
	}
}
