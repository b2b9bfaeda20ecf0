package server_test

// A device filled to ENOSPC through the daemon by
// several clients at once, both protocol versions, then files removed
// and written again, then kill -9 and a new daemon: nothing hangs, the
// full device answers ENOSPC (never EIO, never a hang), space comes back
// after removes, and every byte an fsync acknowledged is there after the
// kill.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/zonefold/zonefold/server"
)

// hostilePattern is the content of file name at off: different per file and
// per block, so that a block of another file or an old block shows.
func hostilePattern(name string, off, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		p := off + i
		b[i] = byte(p/4096) ^ byte(p) ^ name[len(name)-1]*31
	}
	return b
}

// hostileFiller writes name in chunks until the device refuses, fsyncing
// every few chunks, and returns how many bytes the last successful fsync
// covered and the error that stopped it.
func hostileFiller(ctx context.Context, c *server.Client, name string, limit int) (int, error) {
	h, _, err := c.Open(ctx, name, server.OpenCreate)
	if err != nil {
		return 0, err
	}
	// Closed when done: a removed file's data stays while a handle has it.
	defer c.CloseFile(ctx, h)
	const chunk = 64 << 10
	synced, off := 0, 0
	for off < limit {
		if _, err := c.WriteAt(ctx, h, hostilePattern(name, off, chunk), int64(off)); err != nil {
			return synced, fmt.Errorf("write at %d: %w", off, err)
		}
		off += chunk
		if off%(256<<10) == 0 {
			if err := c.Fsync(ctx, h); err != nil {
				return synced, fmt.Errorf("fsync at %d: %w", off, err)
			}
			synced = off
		}
	}
	if err := c.Fsync(ctx, h); err != nil {
		return synced, fmt.Errorf("fsync at %d: %w", off, err)
	}
	return off, nil
}

// TestFillToENOSPCThenDeleteAndKill9: four clients (two with rings,
// two with socket framing) fill a small device until it refuses them; each
// must stop with ENOSPC within the deadline. Half the files are removed,
// the other two clients write again (the space must come back), and the
// daemon is killed with SIGKILL. A new daemon must serve every fsynced
// byte of every surviving file, and the removed files must be gone.
func TestFillToENOSPCThenDeleteAndKill9(t *testing.T) {
	d, dev := hostileSmallDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dialers := []func(context.Context, string, int) (*server.Client, error){
		server.Dial, server.DialSocketFraming, server.Dial, server.DialSocketFraming,
	}
	clients := make([]*server.Client, len(dialers))
	for i, dial := range dialers {
		c, err := dial(ctx, d.socket, 4<<20)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients[i] = c
	}
	synced := make([]int, len(clients))
	errs := make([]error, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			synced[i], errs[i] = hostileFiller(ctx, c, fmt.Sprintf("fill%d", i), 64<<20)
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("filling the device hung: %v\n%s", errs, d.stderr)
	}
	for i, err := range errs {
		if !errors.Is(err, server.StatusNoSpace) {
			t.Fatalf("client %d filling the device: got %v, want ENOSPC", i, err)
		}
	}
	t.Logf("fsynced before ENOSPC: %v", synced)
	// Free half the files; the two other clients write again.
	for i := 0; i < 2; i++ {
		if err := clients[i].Remove(ctx, fmt.Sprintf("fill%d", i)); err != nil {
			t.Fatalf("remove on a full device: %v", err)
		}
	}
	again := make([]int, 2)
	for j := 2; j < 4; j++ {
		c, name := clients[j], fmt.Sprintf("again%d", j)
		n, err := hostileFiller(ctx, c, name, 2<<20)
		if err != nil {
			t.Fatalf("write %s after removes freed %d+%d bytes: %v (%d fsynced)", name, synced[0], synced[1], err, n)
		}
		again[j-2] = n
	}
	d, c := hostileKill9(t, d, dev)
	for i := 0; i < 2; i++ {
		if _, err := c.Stat(ctx, fmt.Sprintf("fill%d", i)); !errors.Is(err, server.StatusNotExist) {
			t.Errorf("fill%d was removed before the kill; stat after: %v", i, err)
		}
	}
	check := func(name string, n int) {
		got := readWhole(t, c, name)
		if len(got) < n {
			t.Errorf("%s: %d bytes after kill -9, %d were fsynced", name, len(got), n)
			return
		}
		if want := hostilePattern(name, 0, n); !bytes.Equal(got[:n], want) {
			i := 0
			for got[i] == want[i] {
				i++
			}
			t.Errorf("%s: fsynced bytes differ after kill -9 from offset %d", name, i)
		}
	}
	for i := 2; i < 4; i++ {
		check(fmt.Sprintf("fill%d", i), synced[i])
		check(fmt.Sprintf("again%d", i), again[i-2])
	}
	d.stop()
}

// hostileKill9 kills d with SIGKILL, starts a new daemon on dev and dials
// it; the client closes with the test.
func hostileKill9(t *testing.T, d *daemonProc, dev string) (*daemonProc, *server.Client) {
	t.Helper()
	d.kill9()
	d = startServe(t, dev, d.socket)
	c, err := server.Dial(context.Background(), d.socket, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return d, c
}

// TestKilledWhileFullRestartsAndFrees: the daemon is killed while
// its device is full and writers still hammer it; the new daemon must
// start (recovery on a full device), serve every fsynced byte, let a
// remove free room for a new file that is then durable across a second
// kill -9.
func TestKilledWhileFullRestartsAndFrees(t *testing.T) {
	d, dev := hostileSmallDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const writers = 3
	synced := make([]int, writers)
	var wg sync.WaitGroup
	full := make(chan struct{}, writers)
	for i := range writers {
		c, err := server.Dial(ctx, d.socket, 4<<20)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Go(func() {
			name := fmt.Sprintf("full%d", i)
			n, err := hostileFiller(ctx, c, name, 64<<20)
			synced[i] = n
			if !errors.Is(err, server.StatusNoSpace) {
				return
			}
			full <- struct{}{}
			// Keep hammering the full device until the kill.
			h, _, err := c.Open(ctx, name, 0)
			for err == nil {
				_, err = c.WriteAt(ctx, h, hostilePattern(name, 0, 64<<10), int64(n))
				if errors.Is(err, server.StatusNoSpace) {
					err = c.Fsync(ctx, h)
				}
			}
		})
	}
	<-full
	d, c := hostileKill9(t, d, dev)
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatal("writers hung on the full device")
	}
	for i := range writers {
		name := fmt.Sprintf("full%d", i)
		got := readWhole(t, c, name)
		if len(got) < synced[i] || !bytes.Equal(got[:synced[i]], hostilePattern(name, 0, synced[i])) {
			t.Fatalf("%s after kill -9 on a full device: %d bytes, %d fsynced, equal prefix %d",
				name, len(got), synced[i], hostileCommon(got, hostilePattern(name, 0, len(got))))
		}
	}
	if err := c.Remove(ctx, "full0"); err != nil {
		t.Fatalf("remove after restart on a full device: %v", err)
	}
	n, err := hostileFiller(ctx, c, "after", 2<<20)
	if err != nil {
		t.Fatalf("write after a remove freed %d bytes: %v (%d fsynced)", synced[0], err, n)
	}
	d, c = hostileKill9(t, d, dev)
	if got := readWhole(t, c, "after"); !bytes.Equal(got, hostilePattern("after", 0, n)) {
		t.Fatalf("after: %d bytes after the second kill -9, %d fsynced", len(got), n)
	}
	d.stop()
}

// hostileSmallDaemon starts a daemon on a fresh 24 MiB emulated device of
// 1 MiB zones, small enough to fill in a moment.
func hostileSmallDaemon(t *testing.T) (*daemonProc, string) {
	dir := t.TempDir()
	dev := fmt.Sprintf("emu:%s?zone_size=1M&zones=24", filepath.Join(dir, "dev"))
	return startServe(t, dev, filepath.Join(dir, "zf.sock")), dev
}
