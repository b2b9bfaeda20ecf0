package pebblefs

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/cockroachdb/errors/oserror"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestH25DStatSeesOtherHandlesWrites: a file's size, by name or by
// another handle's Stat, covers what a writer wrote and has not synced
// (Pebble stats a reused WAL through its new handle, and sizes tables
// and WALs by name, as on a kernel file system).
func TestH25DStatSeesOtherHandlesWrites(t *testing.T) {
	e := formatOpen(t, emuDevice(t, 16, "1M"), 0, testConfig())
	defer e.Close()
	y := New(e)
	w, err := y.Create("f", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r, err := y.Open("f")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	want := int64(0)
	for i, n := range []int{1, 4095, 4096, 10000, 70000} {
		b := bytes.Repeat([]byte{byte(i + 1)}, n)
		if _, err := w.Write(b); err != nil {
			t.Fatal(err)
		}
		want += int64(n)
		for who, st := range map[string]func() (vfs.FileInfo, error){
			"FS.Stat": func() (vfs.FileInfo, error) { return y.Stat("f") },
			"writer":  w.Stat,
			"reader":  r.Stat,
		} {
			fi, err := st()
			if err != nil || fi.Size() != want {
				t.Fatalf("after %d bytes written: %s's Stat: %v, %v", want, who, fi, err)
			}
		}
		got := make([]byte, n)
		if _, err := r.ReadAt(got, want-int64(n)); err != nil || !bytes.Equal(got, b) {
			t.Fatalf("the reader reads the %d bytes written last: %v", n, err)
		}
	}
}

// TestH25DListNestedAndRenamed: List names each directory's own entries,
// subdirectories once, after renames across directories and removals.
func TestH25DListNestedAndRenamed(t *testing.T) {
	e := formatOpen(t, emuDevice(t, 16, "1M"), 0, testConfig())
	defer e.Close()
	y := New(e)
	for _, d := range []string{"a/b/c", "a/bb", "a/b-c", "ab"} {
		if err := y.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"a/x", "a/b/y", "a/b/c/z", "a/bb/w", "a/b-c/v", "ab/u", "top"} {
		mustWrite(t, y, f, []byte(f))
	}
	want := map[string][]string{
		"":        {"a", "ab", "top"},
		"/":       {"a", "ab", "top"},
		"a":       {"b", "b-c", "bb", "x"},
		"a/":      {"b", "b-c", "bb", "x"},
		"a/b":     {"c", "y"},
		"a//b/./": {"c", "y"},
		"a/b/c":   {"z"},
		"a/bb":    {"w"},
		"ab":      {"u"},
	}
	check := func(when string) {
		t.Helper()
		for d, w := range want {
			if got := sortedList(t, y, d); !slices.Equal(got, w) {
				t.Fatalf("%s: List(%q) = %q, want %q", when, d, got, w)
			}
		}
	}
	check("made")
	if err := y.Rename("a/b/c/z", "a/z2"); err != nil {
		t.Fatal(err)
	}
	if err := y.Rename("top", "a/b/c/top"); err != nil {
		t.Fatal(err)
	}
	want[""], want["/"] = []string{"a", "ab"}, []string{"a", "ab"}
	want["a"] = []string{"b", "b-c", "bb", "x", "z2"}
	want["a/"] = want["a"]
	want["a/b/c"] = []string{"top"}
	check("renamed")
	if got := readFile(t, y, "a/b/c/top"); string(got) != "top" {
		t.Fatalf("renamed file holds %q", got)
	}
	if err := y.RemoveAll("a/b"); err != nil {
		t.Fatal(err)
	}
	delete(want, "a/b")
	delete(want, "a//b/./")
	delete(want, "a/b/c")
	want["a"] = []string{"b-c", "bb", "x", "z2"}
	want["a/"] = want["a"]
	check("a/b removed")
	for _, d := range []string{"a/b", "a/b/c", "nothing"} {
		if _, err := y.List(d); !oserror.IsNotExist(err) {
			t.Fatalf("List(%q) of a directory that is gone: %v, want not-exist", d, err)
		}
	}
	if _, err := y.List("a/x"); err == nil {
		t.Fatal("List of a file succeeded")
	}
	// A file renamed into a directory that is gone fails, and stays.
	if err := y.Rename("a/x", "a/b/x"); !oserror.IsNotExist(err) {
		t.Fatalf("rename into a removed directory: %v, want not-exist", err)
	}
	if got := readFile(t, y, "a/x"); string(got) != "a/x" {
		t.Fatalf("a/x after the failed rename: %q", got)
	}
}

// TestH25DRemoveAllKeepsOpenHandles: RemoveAll of a directory leaves its
// open files to their handles (as unlink does) and a new tree of the
// same names is a new one.
func TestH25DRemoveAllKeepsOpenHandles(t *testing.T) {
	e := formatOpen(t, emuDevice(t, 16, "1M"), 0, testConfig())
	defer e.Close()
	y := New(e)
	if err := y.MkdirAll("d/e", 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, y, "d/e/f", []byte("old"))
	r, err := y.Open("d/e/f")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w, err := y.OpenReadWrite("d/g", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if err := y.RemoveAll("d"); err != nil {
		t.Fatal(err)
	}
	if n := len(e.List()); n != 0 {
		t.Fatalf("%d engine names after RemoveAll", n)
	}
	if _, err := w.Write([]byte("into an unlinked file")); err != nil {
		t.Fatalf("write through a handle of a removed file: %v", err)
	}
	if err := w.Sync(); err != nil {
		t.Fatalf("sync a removed file: %v", err)
	}
	w.Close()
	if err := y.MkdirAll("d/e", 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, y, "d/e/f", []byte("new!"))
	b := make([]byte, 8)
	if n, _ := r.ReadAt(b, 0); string(b[:n]) != "old" {
		t.Fatalf("the removed file's handle reads %q", b[:n])
	}
	if got := readFile(t, y, "d/e/f"); string(got) != "new!" {
		t.Fatalf("the new file reads %q", got)
	}
	if got := sortedList(t, y, "d"); !slices.Equal(got, []string{"e"}) {
		t.Fatalf("List(d) = %q: the removed d/g came back", got)
	}
}

// TestH25DLocks: locks exclude across FS values on one engine and across
// Pebble DBs; a failed Lock leaves nothing held; a Closer closed twice
// releases only its own lock; Lock truncates.
func TestH25DLocks(t *testing.T) {
	e := formatOpen(t, emuDevice(t, 32, "1M"), 0, testConfig())
	defer e.Close()
	y1, y2 := New(e), New(e)
	if _, err := y1.Lock("nodir/LOCK"); err == nil {
		t.Fatal("locked a file in a missing directory")
	}
	if err := y1.MkdirAll("nodir", 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, y1, "nodir/LOCK", []byte("junk"))
	l1, err := y2.Lock("/nodir//LOCK")
	if err != nil {
		t.Fatalf("lock after a failed lock of the name: %v", err)
	}
	if fi, err := y1.Stat("nodir/LOCK"); err != nil || fi.Size() != 0 {
		t.Fatalf("Lock did not truncate: %v, %v", fi, err)
	}
	if _, err := y1.Lock("nodir/LOCK"); err == nil {
		t.Fatal("a second FS on the engine locked a held lock")
	}
	if err := l1.Close(); err != nil {
		t.Fatal(err)
	}
	l2, err := y1.Lock("nodir/LOCK")
	if err != nil {
		t.Fatal(err)
	}
	_ = l1.Close() // closed again: must not release l2's lock
	if _, err := y2.Lock("nodir/LOCK"); err == nil {
		t.Fatal("a Closer closed twice released the next holder's lock")
	}
	l2.Close()

	// Pebble: one DB per directory, whichever FS value opens it.
	o1 := smallOptions(y1)
	db, err := pebble.Open("db", o1)
	if err != nil {
		t.Fatal(err)
	}
	if db2, err := pebble.Open("db", smallOptions(y2)); err == nil {
		db2.Close()
		t.Fatal("a second Pebble opened a DB directory that is open")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db2, err := pebble.Open("db", smallOptions(y2))
	if err != nil {
		t.Fatalf("open after the first closed: %v", err)
	}
	db2.Close()
}

// TestH25DReuseForWrite: the reused file keeps its identity (a reader of
// the old name sees the new writes), its size is the old one until
// written past, a missing old name fails without making the new one, and
// reuse onto an existing name replaces it.
func TestH25DReuseForWrite(t *testing.T) {
	e := formatOpen(t, emuDevice(t, 16, "1M"), 0, testConfig())
	defer e.Close()
	y := New(e)
	if err := y.MkdirAll("wal", 0o755); err != nil {
		t.Fatal(err)
	}
	old := bytes.Repeat([]byte("o"), 40000)
	mustWrite(t, y, "wal/000001.log", old)
	mustWrite(t, y, "wal/000009.log", []byte("victim"))
	r, err := y.Open("wal/000001.log")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := y.ReuseForWrite("wal/000404.log", "wal/000010.log", "pebble-wal"); err == nil {
		t.Fatal("reused a file that does not exist")
	}
	if _, err := y.Stat("wal/000010.log"); !oserror.IsNotExist(err) {
		t.Fatalf("a failed reuse made its new name: %v", err)
	}
	f, err := y.ReuseForWrite("wal/000001.log", "wal/000009.log", "pebble-wal")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || fi.Size() != int64(len(old)) {
		t.Fatalf("a reused WAL's Stat: %v, %v; want the old size %d", fi, err, len(old))
	}
	if _, err := f.Write([]byte("NEW")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 5)
	if _, err := r.ReadAt(b, 0); err != nil || string(b) != "NEWoo" {
		t.Fatalf("the old name's reader reads %q, %v: not the reused file", b, err)
	}
	if got := sortedList(t, y, "wal"); !slices.Equal(got, []string{"000009.log"}) {
		t.Fatalf("List(wal) = %q", got)
	}
	if got := readFile(t, y, "wal/000009.log"); len(got) != len(old) || string(got[:4]) != "NEWo" {
		t.Fatalf("the reused file reads %d bytes %q...", len(got), got[:min(8, len(got))])
	}
}

// TestH25DDirSync: a directory's Sync fails once the directory is gone,
// and the root's always works.
func TestH25DDirSync(t *testing.T) {
	e := formatOpen(t, emuDevice(t, 16, "1M"), 0, testConfig())
	defer e.Close()
	y := New(e)
	if err := y.MkdirAll("d", 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := y.OpenDir("d")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	root, err := y.OpenDir("/")
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := y.Remove("d"); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); !oserror.IsNotExist(err) {
		t.Fatalf("Sync of a removed directory: %v, want not-exist", err)
	}
	if err := root.Sync(); err != nil {
		t.Fatal(err)
	}
	if fi, err := root.Stat(); err != nil || !fi.IsDir() {
		t.Fatalf("root Stat: %v, %v", fi, err)
	}
}

// TestH25DCheckpointIntoNewNestedDir: Checkpoint makes the destination's
// missing parents, syncs them, and the checkpoint opens with the data;
// a checkpoint onto an existing name fails and leaves it alone.
func TestH25DCheckpointIntoNewNestedDir(t *testing.T) {
	e := formatOpen(t, emuDevice(t, 32, "1M"), 0, testConfig())
	defer e.Close()
	y := New(e)
	db, err := pebble.Open("db", smallOptions(y))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i := range 500 {
		if err := db.Set([]byte(fmt.Sprintf("k%04d", i)), bytes.Repeat([]byte{byte(i)}, 300), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte("unflushed"), []byte("in the WAL"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Checkpoint("backups/2026/ck1", pebble.WithFlushedWAL()); err != nil {
		t.Fatal(err)
	}
	if err := db.Checkpoint("backups/2026/ck1"); err == nil {
		t.Fatal("a checkpoint onto an existing directory succeeded")
	}
	if got := sortedList(t, y, "backups"); !slices.Equal(got, []string{"2026"}) {
		t.Fatalf("List(backups) = %q", got)
	}
	ro := smallOptions(y)
	ro.ReadOnly = true
	cdb, err := pebble.Open("backups/2026/ck1", ro)
	if err != nil {
		t.Fatal(err)
	}
	defer cdb.Close()
	v, closer, err := cdb.Get([]byte("unflushed"))
	if err != nil || string(v) != "in the WAL" {
		t.Fatalf("the checkpoint's unflushed key: %q, %v", v, err)
	}
	closer.Close()
	v, closer, err = cdb.Get([]byte("k0499"))
	if err != nil || !bytes.Equal(v, bytes.Repeat([]byte{byte(499 % 256)}, 300)) {
		t.Fatalf("the checkpoint's k0499: %d bytes, %v", len(v), err)
	}
	closer.Close()
	if err := cdb.CheckLevels(nil); err != nil {
		t.Fatal(err)
	}
}
