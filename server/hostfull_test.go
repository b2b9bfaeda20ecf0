package server_test

// An emulated device is a sparse file, so the file system it lives on can
// fill before the device does: the host's ENOSPC then fails the device's
// writes (appends, the metadata log, checkpoints) wherever they are. Found
// by hand on a tmpfs of 8 MiB under a 64 MiB device: puts failed with EIO,
// the daemon kept serving, and once the tmpfs grew, writes worked again and
// a kill -9 lost nothing fsynced. This test keeps it so.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zonefold/zonefold/server"
)

// mountSmallTmpfs mounts a tmpfs of size at a new directory for the test
// and returns the directory and a function that resizes the tmpfs. It
// skips where mounting is not allowed (not root, no CAP_SYS_ADMIN).
func mountSmallTmpfs(t *testing.T, size string) (string, func(size string)) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("mount a tmpfs of %s (needs root): %v", size, err)
	}
	// Registered after the daemon's cleanups would be too late for a
	// busy mount; a lazy unmount lets the daemon's kill finish first.
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir, func(size string) {
		t.Helper()
		if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_REMOUNT, "size="+size); err != nil {
			t.Fatalf("grow the tmpfs to %s: %v", size, err)
		}
	}
}

// TestEmuOnAFullHostFileSystem: two clients (rings and socket framing)
// fill a 32 MiB emulated device that sits on a 6 MiB tmpfs. Each must stop
// with a clear error (EIO or ENOSPC), not a hang; the daemon must keep
// answering; once the tmpfs grows, a new file must be written and fsynced;
// and after kill -9, every fsynced byte must be there and fsck must pass.
func TestEmuOnAFullHostFileSystem(t *testing.T) {
	mnt, grow := mountSmallTmpfs(t, "6m")
	dev := fmt.Sprintf("emu:%s?zone_size=1M&zones=32", filepath.Join(mnt, "dev"))
	d := startServe(t, dev, filepath.Join(t.TempDir(), "zf.sock"))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	dialers := []func(context.Context, string, int) (*server.Client, error){server.Dial, server.DialSocketFraming}
	synced := make([]int, len(dialers))
	errs := make([]error, len(dialers))
	var wg sync.WaitGroup
	for i, dial := range dialers {
		c, err := dial(ctx, d.socket, 4<<20)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Go(func() { synced[i], errs[i] = hostileFiller(ctx, c, fmt.Sprintf("fill%d", i), 24<<20) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("writing past the host's space hung: %v\n%s", errs, d.stderr)
	}
	for i, err := range errs {
		if !errors.Is(err, server.StatusIO) && !errors.Is(err, server.StatusNoSpace) {
			t.Fatalf("client %d past the host's space: got %v, want EIO or ENOSPC\n%s", i, err, d.stderr)
		}
	}
	t.Logf("fsynced before the host filled: %v; errors: %v", synced, errs)

	// Still serving: a new client connects and lists.
	c := dialServe(t, d)
	if _, err := c.List(ctx); err != nil {
		t.Fatalf("list with the host's file system full: %v", err)
	}

	// Room again: writes must work again, once the daemon's retries (of
	// its metadata log's half switch, and of writeback) come round.
	grow("256m")
	var after int
	for {
		n, err := hostileFiller(ctx, c, "after", 2<<20)
		if err == nil {
			after = n
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no write worked after the host's file system grew: %v\n%s", err, d.stderr)
		}
		c.Remove(ctx, "after")
		time.Sleep(200 * time.Millisecond)
	}

	d, c = hostileKill9(t, d, dev)
	for i := range dialers {
		name := fmt.Sprintf("fill%d", i)
		if synced[i] == 0 {
			continue
		}
		got := readWhole(t, c, name)
		if len(got) < synced[i] || hostileCommon(got, hostilePattern(name, 0, len(got))) < synced[i] {
			t.Errorf("%s after kill -9: %d bytes, %d fsynced, equal prefix %d",
				name, len(got), synced[i], hostileCommon(got, hostilePattern(name, 0, len(got))))
		}
	}
	if got := readWhole(t, c, "after"); hostileCommon(got, hostilePattern("after", 0, after)) < after {
		t.Errorf("after: %d bytes after kill -9, %d fsynced", len(got), after)
	}
	d.stop()
	fsckClean(t, dev, "after the host's file system filled")
}
