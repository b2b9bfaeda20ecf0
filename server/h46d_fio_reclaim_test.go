package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/server"
)

// TestH46dFioRandRWOnAFreshLayoutIsNotHeldForExpiry: a plain fio job,
// random 4 KiB reads and writes at iodepth 1024 on a file fio lays out
// first (32 MiB through a 16 MiB cache), runs to its end. Each random
// write dirtied a block of one of the layout's large folios, so every
// folio was dirty with 2 MiB of dirty data, half the background
// threshold; every miss then waited for memory that the flusher, kicked
// for it, did not free until the dirty data expired (5 s by default):
// the job ran at 80-250 IOPS, single I/Os took 11 s and a Ctrl-C took
// 16 s. With the expiry an hour, as here, it waited for the hour.
func TestH46dFioRandRWOnAFreshLayoutIsNotHeldForExpiry(t *testing.T) {
	fio, so := fioEnv(t)
	dir := t.TempDir()
	// In process, for the engine's writeback expiry (no flag sets it).
	cfg := server.RunConfig{Device: fmt.Sprintf("emu:%s?zone_size=16M&zones=16", filepath.Join(dir, "dev")),
		Socket: filepath.Join(dir, "zf.sock"), Format: true,
		Engine: engine.Config{CacheBytes: 16 << 20, DirtyLimit: 8 << 20},
		Log:    slog.New(slog.NewTextHandler(io.Discard, nil))}
	cfg.Engine.Writeback.Expire = time.Hour
	runCtx, stop := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan error, 1)
	cfg.Ready = func(*server.Server, net.Addr) { close(ready) }
	go func() { done <- server.Run(runCtx, cfg) }()
	select {
	case <-ready:
	case err := <-done:
		stop()
		t.Fatalf("daemon did not start: %v", err)
	}
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	})
	// The bound only turns a hang into a failure: the job takes about
	// a second.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, fio, "--name=h46d", "--ioengine=external:"+so, "--sock="+cfg.Socket,
		"--filename=f", "--rw=randrw", "--bs=4k", "--iodepth=1024", "--size=32m", "--io_size=16m")
	cmd.Dir = t.TempDir()
	// fio's job is a process of its own session: killing fio leaves it
	// holding the output pipe until the daemon's end closes its
	// connection. Do not wait for it.
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("fio randrw at iodepth 1024 on a fresh 32 MiB layout through a 16 MiB cache did not finish in 2 minutes (misses waiting for memory the flusher frees only at expiry, here an hour):\n%s", out)
	}
	if err != nil || !strings.Contains(string(out), "err= 0") {
		t.Fatalf("fio: %v\n%s", err, out)
	}
}
