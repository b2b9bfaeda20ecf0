package pebblefs

import (
	"bytes"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestH37BHandlesAcrossPowerCuts: across power cuts of the emulated
// device, what a handle writes and syncs after its file was renamed is in
// the new name's file; a reused WAL (ReuseForWrite) holds its synced new
// bytes over the old ones, at its old size, and nothing under its old
// name; a rename over a file a reader holds leaves the renamed data; a
// file created over a synced one holds only its own synced data; and a
// synced prefix survives an unsynced tail.
func TestH37BHandlesAcrossPowerCuts(t *testing.T) {
	name, dev, fd, e := openFrozen(t, 16, "1M", testConfig())
	y := New(e)
	cut := func() {
		t.Helper()
		dev, fd, e = powerCutReopen(t, name, testConfig(), dev, fd, e)
		y = New(e)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	pat := func(c byte, n int) []byte { return bytes.Repeat([]byte{c}, n) }
	check := func(name string, want []byte) {
		t.Helper()
		got := readFile(t, y, name)
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: %d bytes (%q...), want %d (%q...)", name, len(got), got[:min(8, len(got))], len(want), want[:min(8, len(want))])
		}
	}
	gone := func(name string) {
		t.Helper()
		if _, err := y.Stat(name); err == nil {
			t.Fatalf("%s is there", name)
		}
	}
	must(y.MkdirAll("db", 0o755))

	// Rename an open writer; write and sync through the handle.
	f, err := y.Create("db/a", vfs.WriteCategoryUnspecified)
	must(err)
	_, err = f.Write(pat('a', 10000))
	must(err)
	must(f.Sync())
	must(y.Rename("db/a", "db/b"))
	_, err = f.Write(pat('b', 5000))
	must(err)
	must(f.Sync())
	cut()
	gone("db/a")
	check("db/b", append(pat('a', 10000), pat('b', 5000)...))

	// ReuseForWrite of a synced WAL, then a synced write through it.
	mustWrite(t, y, "db/000001.log", pat('o', 40000))
	f, err = y.ReuseForWrite("db/000001.log", "db/000009.log", "pebble-wal")
	must(err)
	_, err = f.Write(pat('n', 3000))
	must(err)
	must(f.Sync())
	_, err = f.Write(pat('u', 3000)) // not synced
	must(err)
	cut()
	gone("db/000001.log")
	got := readFile(t, y, "db/000009.log")
	if len(got) != 40000 || !bytes.Equal(got[:3000], pat('n', 3000)) || !bytes.Equal(got[6000:], pat('o', 34000)) {
		t.Fatalf("reused WAL after the cut: %d bytes", len(got))
	}
	for i, c := range got[3000:6000] {
		if c != 'u' && c != 'o' && c != 0 {
			t.Fatalf("reused WAL byte %d is %q", 3000+i, c)
		}
	}

	// Rename over a file a reader holds; the renamed data wins.
	mustWrite(t, y, "db/x", pat('x', 7000))
	mustWrite(t, y, "db/y", pat('y', 9000))
	r, err := y.Open("db/x")
	must(err)
	must(y.Rename("db/y", "db/x"))
	old := make([]byte, 7000)
	if n, err := r.ReadAt(old, 0); n != 7000 || !bytes.Equal(old, pat('x', 7000)) {
		t.Fatalf("the reader of the file renamed over reads %d bytes, %v", n, err)
	}
	cut() // with the reader open: its file is unnamed, and gone after
	gone("db/y")
	check("db/x", pat('y', 9000))

	// Create over a synced file, write, sync.
	mustWrite(t, y, "db/c", pat('1', 20000))
	f, err = y.Create("db/c", vfs.WriteCategoryUnspecified)
	must(err)
	_, err = f.Write(pat('2', 500))
	must(err)
	must(f.Sync())
	cut()
	check("db/c", pat('2', 500))

	// A synced prefix, an unsynced tail, a cut: the prefix is there and
	// the size covers it.
	f, err = y.Create("db/d", vfs.WriteCategoryUnspecified)
	must(err)
	_, err = f.Write(pat('p', 12345))
	must(err)
	must(f.Sync())
	_, err = f.Write(pat('q', 70000))
	must(err)
	cut()
	got = readFile(t, y, "db/d")
	if len(got) < 12345 || !bytes.Equal(got[:12345], pat('p', 12345)) {
		t.Fatalf("db/d after the cut: %d bytes", len(got))
	}
	must(e.Close())
}
