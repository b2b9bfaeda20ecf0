package server_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/zonefold/zonefold/server"
)

// TestH43dFioJobAtTheClientCap: a daemon serving at most one client
// (--max-clients 1) runs one fio job at a time. fio's setup lays the
// job's file out over a connection of its own, which the engine closes
// before the job connects, so that it does not hold the daemon's one
// place; but the daemon released that place only once it had noticed
// the setup connection's end and torn its session down, and the job,
// connecting at once, was often refused first ("zonefold connect,
// error=Too many users": 6 of 20 runs by hand). Every run must pass.
func TestH43dFioJobAtTheClientCap(t *testing.T) {
	fio, engine := fioEnv(t)
	socket := server.NewTestDaemonMaxConns(t, 1)
	const runs = 12
	for i := range runs {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		// rw=randrw: fio's setup lays the file out (a setup connection)
		// before the job connects.
		cmd := exec.CommandContext(ctx, fio, "--name=cap", "--ioengine=external:"+engine, "--sock="+socket,
			"--filename=cap", "--rw=randrw", "--bs=4k", "--iodepth=8", "--size=256k", "--unlink=1")
		cmd.Dir = t.TempDir()
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil || !strings.Contains(string(out), "err= 0") {
			t.Fatalf("run %d of %d: fio: %v\n%s", i+1, runs, err, lastLines(string(out), 15))
		}
	}
}
