package server_test

// Namespace operations against files other clients
// hold open and have cached, then kill -9: no stale bytes, through the
// old handles, the names or after the restart.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/zonefold/zonefold/server"
)

func hostileFill(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }

// hostileOpen opens name on c and fails the test on error.
func hostileOpen(t *testing.T, c *server.Client, name string, flags uint8) uint32 {
	t.Helper()
	h, _, err := c.Open(context.Background(), name, flags)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// hostilePut writes p at off through h and fails the test on error.
func hostilePut(t *testing.T, c *server.Client, h uint32, p []byte, off int64) {
	t.Helper()
	if _, err := c.WriteAt(context.Background(), h, p, off); err != nil {
		t.Fatal(err)
	}
}

// hostileCached reads the whole of name through h, so that its blocks are
// in the daemon's cache.
func hostileCached(t *testing.T, c *server.Client, h uint32, n int) {
	t.Helper()
	if _, err := c.ReadAt(context.Background(), h, make([]byte, n), 0); err != nil {
		t.Fatal(err)
	}
}

// TestNamespaceOverCachedFilesAcrossKill9:
//   - rename over a file another client has open and cached: that client's
//     handle keeps reading the replaced file, never the renamed one's
//     bytes; the name serves the renamed file (its
//     dirty bytes too), and a write and fsync through the renamed file's
//     old handle land in it;
//   - remove a cached file and create the name again: the new file is
//     empty, never the old bytes;
//   - truncate a cached file into a block and write past the old end: the
//     cut range reads as zeros;
//
// and after kill -9 a new daemon serves the same.
func TestNamespaceOverCachedFilesAcrossKill9(t *testing.T) {
	dir := t.TempDir()
	dev := fmt.Sprintf("emu:%s?zone_size=4M&zones=16", filepath.Join(dir, "dev"))
	d := startServe(t, dev, filepath.Join(dir, "zf.sock"))
	ctx := context.Background()
	const mb = 1 << 20
	x, err := server.Dial(ctx, d.socket, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	y, err := server.DialSocketFraming(ctx, d.socket, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer y.Close()

	// Rename over a cached file.
	hv := hostileOpen(t, x, "victim", server.OpenCreate)
	hostilePut(t, x, hv, hostileFill('V', mb), 0)
	if err := x.Fsync(ctx, hv); err != nil {
		t.Fatal(err)
	}
	hostileCached(t, x, hv, mb)
	hs := hostileOpen(t, y, "src", server.OpenCreate)
	hostilePut(t, y, hs, hostileFill('S', mb), 0)
	if err := y.Fsync(ctx, hs); err != nil {
		t.Fatal(err)
	}
	hostilePut(t, y, hs, hostileFill('D', 64<<10), mb) // dirty at the rename
	if err := y.Rename(ctx, "src", "victim"); err != nil {
		t.Fatal(err)
	}
	replaced := make([]byte, 4096)
	if _, err := x.ReadAt(ctx, hv, replaced, 0); err != nil || !bytes.Equal(replaced, hostileFill('V', 4096)) {
		t.Errorf("read through a handle of the file a rename replaced: %v, first bytes %q; want the replaced file's", err, replaced[:8])
	}
	wantVictim := append(hostileFill('S', mb), hostileFill('D', 64<<10)...)
	if got := readWhole(t, x, "victim"); !bytes.Equal(got, wantVictim) {
		t.Errorf("after rename over it, victim reads %d bytes starting %q, want the renamed file's %d", len(got), got[:min(8, len(got))], len(wantVictim))
	}
	hostilePut(t, y, hs, hostileFill('W', 4096), 0)
	if err := y.Fsync(ctx, hs); err != nil {
		t.Fatal(err)
	}
	copy(wantVictim, hostileFill('W', 4096))

	// Remove a cached file and create the name again.
	hg := hostileOpen(t, x, "gone", server.OpenCreate)
	hostilePut(t, x, hg, hostileFill('G', mb), 0)
	if err := x.Fsync(ctx, hg); err != nil {
		t.Fatal(err)
	}
	hostileCached(t, x, hg, mb)
	if err := y.Remove(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	hn := hostileOpen(t, y, "gone", server.OpenCreate|server.OpenExcl)
	hostilePut(t, y, hn, hostileFill('N', 100), 0)
	hostilePut(t, y, hn, hostileFill('N', 100), mb-100) // grow past the old bytes' range
	if err := y.Fsync(ctx, hn); err != nil {
		t.Fatal(err)
	}
	wantGone := make([]byte, mb)
	copy(wantGone, hostileFill('N', 100))
	copy(wantGone[mb-100:], hostileFill('N', 100))
	if got := readWhole(t, x, "gone"); !bytes.Equal(got, wantGone) {
		t.Errorf("a name removed and created again reads old bytes (%d bytes, %q at 4096)", len(got), got[4096:4104])
	}

	// Truncate a cached file into a block, then write past the old end.
	ht := hostileOpen(t, x, "cut", server.OpenCreate)
	hostilePut(t, x, ht, hostileFill('T', mb), 0)
	if err := x.Fsync(ctx, ht); err != nil {
		t.Fatal(err)
	}
	hostileCached(t, y, hostileOpen(t, y, "cut", 0), mb)
	if err := x.Truncate(ctx, ht, 5000); err != nil {
		t.Fatal(err)
	}
	hostilePut(t, x, ht, []byte{'E'}, 2*mb-1)
	if err := x.Fsync(ctx, ht); err != nil {
		t.Fatal(err)
	}
	wantCut := make([]byte, 2*mb)
	copy(wantCut, hostileFill('T', 5000))
	wantCut[2*mb-1] = 'E'
	if got := readWhole(t, y, "cut"); !bytes.Equal(got, wantCut) {
		t.Errorf("truncate of a cached file then a write past its old end: %d bytes, %q at 5000", len(got), got[5000:5008])
	}

	d, c := hostileKill9(t, d, dev)
	if _, err := c.Stat(ctx, "src"); !errors.Is(err, server.StatusNotExist) {
		t.Errorf("after kill -9 the renamed file's old name: %v, want ENOENT", err)
	}
	for _, f := range []struct {
		name string
		want []byte
	}{{"victim", wantVictim}, {"gone", wantGone}, {"cut", wantCut}} {
		if got := readWhole(t, c, f.name); !bytes.Equal(got, f.want) {
			t.Errorf("after kill -9, %s: %d bytes, want %d (equal prefix %d)", f.name, len(got), len(f.want), hostileCommon(got, f.want))
		}
	}
	c.Close()
	d.stop()
}

// hostileCommon is the length of the common prefix of a and b.
func hostileCommon(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
