package server_test

// Kill -9 tests of what docs/protocol.md promises about deferred creates,
// truncates and renames when the files hold writes no fsync covered.

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/zonefold/zonefold/server"
)

// writeFile opens name with OpenCreate|flags, writes data at 0 and, if
// sync, fsyncs it; it returns the open handle.
func writeFile(t *testing.T, c *server.Client, name string, flags uint8, data []byte, sync bool) uint32 {
	t.Helper()
	ctx := context.Background()
	h, _, err := c.Open(ctx, name, server.OpenCreate|flags)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	if len(data) > 0 {
		if _, err := c.WriteAt(ctx, h, data, 0); err != nil {
			t.Fatalf("write %s: %v", name, err)
		}
	}
	if sync {
		if err := c.Fsync(ctx, h); err != nil {
			t.Fatalf("fsync %s: %v", name, err)
		}
	}
	return h
}

// TestDeferredCreateDurableFromNextFlush: docs/protocol.md says a create
// with OpenDeferSync is durable from the device's next flush — an fsync
// of any other file, or a durable namespace change. Each case creates a
// file deferred, then makes one such flush happen without touching the
// file's own handle, kills the daemon with SIGKILL, and the file must be
// there on the next daemon. A deferred file renamed (a durable namespace
// change of its own) must be under its new name with its fsynced bytes.
func TestDeferredCreateDurableFromNextFlush(t *testing.T) {
	d := newServe(t)
	ctx := context.Background()
	c := dialServe(t, d)
	open := func(name string, flags uint8) uint32 { return writeFile(t, c, name, flags, nil, false) }
	other := writeFile(t, c, "other", 0, []byte("x"), false)
	// Flushed by another file's fsync.
	open("by-fsync", server.OpenDeferSync)
	if err := c.Fsync(ctx, other); err != nil {
		t.Fatal(err)
	}
	// Flushed by fsync of every file (handle 0).
	open("by-fsync-all", server.OpenDeferSync)
	if err := c.Fsync(ctx, 0); err != nil {
		t.Fatal(err)
	}
	// Flushed by a rename of another file.
	open("by-rename", server.OpenDeferSync)
	open("r1", 0)
	if err := c.Rename(ctx, "r1", "r2"); err != nil {
		t.Fatal(err)
	}
	// Flushed by a truncate of another file.
	open("by-truncate", server.OpenDeferSync)
	if err := c.Truncate(ctx, other, 4096); err != nil {
		t.Fatal(err)
	}
	// Flushed by a durable create.
	open("by-create", server.OpenDeferSync)
	open("durable", 0)
	// Renamed itself, with fsynced bytes.
	data := bytes.Repeat([]byte("zonefold"), 1000)
	writeFile(t, c, "deferred-renamed", server.OpenDeferSync, data, true)
	if err := c.Rename(ctx, "deferred-renamed", "renamed"); err != nil {
		t.Fatal(err)
	}
	// Renamed without an fsync: the rename is durable when answered.
	open("deferred-only-renamed", server.OpenDeferSync)
	if err := c.Rename(ctx, "deferred-only-renamed", "only-renamed"); err != nil {
		t.Fatal(err)
	}
	// Renamed over a durable file.
	open("victim", 0)
	open("deferred-over", server.OpenDeferSync)
	if err := c.Rename(ctx, "deferred-over", "victim"); err != nil {
		t.Fatal(err)
	}
	d, c = d.crashRestart(c)
	defer c.Close()
	for _, name := range []string{"by-fsync", "by-fsync-all", "by-rename", "by-truncate", "by-create", "r2", "durable", "only-renamed", "victim"} {
		if _, err := c.Stat(ctx, name); err != nil {
			t.Errorf("%s after kill -9: %v", name, err)
		}
	}
	for _, name := range []string{"r1", "deferred-renamed", "deferred-only-renamed", "deferred-over"} {
		if _, err := c.Stat(ctx, name); err == nil {
			t.Errorf("%s is back after kill -9, though renamed", name)
		}
	}
	if got := readWhole(t, c, "renamed"); !bytes.Equal(got, data) {
		t.Errorf("renamed after kill -9: %d bytes, want %d", len(got), len(data))
	}
	d.stop()
}

// TestTruncateOverDirtyDataSurvivesKill9: a truncate is durable when
// answered, also when the file holds writes no fsync has acknowledged.
// Files with fsynced 0xaa bytes get unsynced 0xbb writes, then a shrink
// into a block (and for some a grow back), then kill -9. After it each
// file has the size the truncates left; below the cut a byte is 0xaa or
// 0xbb; above it (what a grow added back) only zeros: the cut-off bytes,
// old or new, never come back.
func TestTruncateOverDirtyDataSurvivesKill9(t *testing.T) {
	d := newServe(t)
	ctx := context.Background()
	c := dialServe(t, d)
	const size, cut = 1 << 20, 5000
	old := bytes.Repeat([]byte{0xaa}, size)
	dirty := bytes.Repeat([]byte{0xbb}, size)
	type tcase struct {
		name string
		grow bool // truncate back to size after the cut
	}
	cases := []tcase{{"cut", false}}
	for i := range 6 {
		cases = append(cases, tcase{fmt.Sprintf("cut-grow-%d", i), true})
	}
	for _, tc := range cases {
		h := writeFile(t, c, tc.name, 0, old, true)
		if _, err := c.WriteAt(ctx, h, dirty, 0); err != nil {
			t.Fatal(err)
		}
		if err := c.Truncate(ctx, h, cut); err != nil {
			t.Fatal(err)
		}
		if tc.grow {
			if err := c.Truncate(ctx, h, size); err != nil {
				t.Fatal(err)
			}
		}
	}
	d, c = d.crashRestart(c)
	defer c.Close()
	for _, tc := range cases {
		got := readWhole(t, c, tc.name)
		want := cut
		if tc.grow {
			want = size
		}
		if len(got) != want {
			t.Errorf("%s after kill -9: %d bytes, want %d", tc.name, len(got), want)
			continue
		}
		for i, b := range got {
			if i < cut && b != 0xaa && b != 0xbb || i >= cut && b != 0 {
				t.Errorf("%s after kill -9: byte %d is %#x (cut at %d)", tc.name, i, b, cut)
				break
			}
		}
	}
	d.stop()
}

// TestNamespaceOverDirtyDataSurvivesKill9: renames and removes are durable
// when answered, also over files with writes no fsync acknowledged.
//   - over-N: fsynced "src" bytes 0xaa then unsynced 0xbb, renamed over a
//     fsynced 0xcc file: after kill -9 the new name holds 0xaa or 0xbb
//     bytes, never 0xcc; the old name is gone.
//   - recreate-N: a file with unsynced 0xbb bytes is removed and a file of
//     the same name created with fsynced 0xdd bytes: after kill -9 the
//     name holds exactly 0xdd.
func TestNamespaceOverDirtyDataSurvivesKill9(t *testing.T) {
	d := newServe(t)
	ctx := context.Background()
	c := dialServe(t, d)
	const size, n = 512 << 10, 6
	fill := func(b byte) []byte { return bytes.Repeat([]byte{b}, size) }
	write := func(name string, b byte, sync bool, flags uint8) uint32 {
		return writeFile(t, c, name, flags, fill(b), sync)
	}
	for i := range n {
		src, dst := fmt.Sprintf("src-%d", i), fmt.Sprintf("over-%d", i)
		write(dst, 0xcc, true, 0)
		h := write(src, 0xaa, true, 0)
		if _, err := c.WriteAt(ctx, h, fill(0xbb), 0); err != nil {
			t.Fatal(err)
		}
		if err := c.Rename(ctx, src, dst); err != nil {
			t.Fatal(err)
		}
		re := fmt.Sprintf("recreate-%d", i)
		write(re, 0xbb, false, 0)
		if err := c.Remove(ctx, re); err != nil {
			t.Fatal(err)
		}
		write(re, 0xdd, true, server.OpenExcl)
	}
	d, c = d.crashRestart(c)
	defer c.Close()
	for i := range n {
		if _, err := c.Stat(ctx, fmt.Sprintf("src-%d", i)); err == nil {
			t.Errorf("src-%d is back after its rename and kill -9", i)
		}
		got := readWhole(t, c, fmt.Sprintf("over-%d", i))
		if len(got) != size {
			t.Errorf("over-%d after kill -9: %d bytes, want %d", i, len(got), size)
		}
		for j, b := range got {
			if b != 0xaa && b != 0xbb {
				t.Errorf("over-%d after kill -9: byte %d is %#x, want the renamed file's", i, j, b)
				break
			}
		}
		if got := readWhole(t, c, fmt.Sprintf("recreate-%d", i)); !bytes.Equal(got, fill(0xdd)) {
			t.Errorf("recreate-%d after kill -9: %d bytes, not the fsynced 0xdd", i, len(got))
		}
	}
	d.stop()
}
