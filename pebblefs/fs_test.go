package pebblefs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"

	"github.com/cockroachdb/errors/oserror"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/zonefold/zonefold/engine"
)

func mustWrite(t *testing.T, y vfs.FS, name string, data []byte) {
	t.Helper()
	f, err := y.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, y vfs.FS, name string) []byte {
	t.Helper()
	f, err := y.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sortedList(t *testing.T, y vfs.FS, dir string) []string {
	t.Helper()
	l, err := y.List(dir)
	if err != nil {
		t.Fatalf("list %q: %v", dir, err)
	}
	slices.Sort(l)
	return l
}

func TestNamespace(t *testing.T) {
	devName := emuDevice(t, 16, "1M")
	cfg := testConfig()
	e := formatOpen(t, devName, 0, cfg)
	y := New(e)

	if err := y.MkdirAll("/db/wal", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := y.MkdirAll("db/wal/", 0o755); err != nil {
		t.Fatalf("MkdirAll of an existing directory: %v", err)
	}
	mustWrite(t, y, "/db/a", []byte("first"))
	mustWrite(t, y, "db/b", []byte("second"))
	mustWrite(t, y, "db/wal/000001.log", []byte("log"))
	if _, err := y.Create("nodir/x", vfs.WriteCategoryUnspecified); !oserror.IsNotExist(err) {
		t.Fatalf("create in a missing directory: %v, want not-exist", err)
	}
	if got := sortedList(t, y, "db"); !slices.Equal(got, []string{"a", "b", "wal"}) {
		t.Fatalf("List(db) = %q", got)
	}
	if got := sortedList(t, y, "/"); !slices.Equal(got, []string{"db"}) {
		t.Fatalf("List(/) = %q", got)
	}
	if _, err := y.List("db/a"); err == nil {
		t.Fatal("listing a file succeeded")
	}
	if fi, err := y.Stat("db/wal"); err != nil || !fi.IsDir() || fi.Name() != "wal" {
		t.Fatalf("Stat(db/wal) = %v, %v", fi, err)
	}
	if fi, err := y.Stat("db/a"); err != nil || fi.IsDir() || fi.Size() != 5 || fi.Name() != "a" {
		t.Fatalf("Stat(db/a) = %v, %v", fi, err)
	}
	if _, err := y.Stat("db/zzz"); !oserror.IsNotExist(err) {
		t.Fatalf("Stat of a missing file: %v", err)
	}

	// Rename replaces its target atomically.
	if err := y.Rename("db/a", "db/b"); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, y, "db/b"); string(got) != "first" {
		t.Fatalf("after rename db/b = %q", got)
	}
	if got := sortedList(t, y, "db"); !slices.Equal(got, []string{"b", "wal"}) {
		t.Fatalf("List(db) after rename = %q", got)
	}
	if err := y.Rename("db/missing", "db/c"); !oserror.IsNotExist(err) {
		t.Fatalf("rename of a missing file: %v", err)
	}

	// Create replaces a file with a new, empty one; an old handle keeps
	// the replaced file (as vfs.NewMem's does), never seeing the new one.
	old, err := y.Open("db/b")
	if err != nil {
		t.Fatal(err)
	}
	nf, err := y.Create("db/b", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := nf.Stat(); fi.Size() != 0 {
		t.Fatalf("Create over a file: size %d", fi.Size())
	}
	oldBuf := make([]byte, 5)
	if n, err := old.ReadAt(oldBuf, 0); string(oldBuf[:n]) != "first" {
		t.Fatalf("a handle to the replaced file reads %q, %v; want its bytes, \"first\"", oldBuf[:n], err)
	}
	old.Close()
	// A read-only handle does not write.
	ro, _ := y.Open("db/wal/000001.log")
	if _, err := ro.Write([]byte("x")); err == nil {
		t.Fatal("a read-only handle wrote")
	}
	ro.Close()
	nf.Close()

	// ReuseForWrite renames and writes from the start, keeping the tail.
	mustWrite(t, y, "db/wal/000002.log", []byte("0123456789"))
	rf, err := y.ReuseForWrite("db/wal/000002.log", "db/wal/000003.log", "pebble-wal")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rf.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	rf.Close()
	if got := readFile(t, y, "db/wal/000003.log"); string(got) != "abc3456789" {
		t.Fatalf("reused file = %q", got)
	}
	if _, err := y.Stat("db/wal/000002.log"); !oserror.IsNotExist(err) {
		t.Fatalf("the reused file's old name: %v", err)
	}

	// No hard links: LinkOrCopy copies.
	if err := y.Link("db/wal/000001.log", "db/b"); !oserror.IsExist(err) {
		t.Fatalf("link onto an existing file: %v", err)
	}
	if err := y.Link("db/nothing", "db/c"); !oserror.IsNotExist(err) {
		t.Fatalf("link of a missing file: %v", err)
	}
	if err := vfs.LinkOrCopy(y, "db/wal/000001.log", "db/copy"); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, y, "db/copy"); string(got) != "log" {
		t.Fatalf("copy = %q", got)
	}

	// Locks exclude, and release.
	l, err := y.Lock("db/LOCK")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(e).Lock("/db/LOCK"); err == nil {
		t.Fatal("locked a locked file (through another FS on the engine)")
	}
	l.Close()
	l, err = y.Lock("db/LOCK")
	if err != nil {
		t.Fatalf("relock: %v", err)
	}
	l.Close()

	// Directories: not removed while they hold files, RemoveAll does.
	if err := y.Remove("db/wal"); err == nil {
		t.Fatal("removed a directory that holds files")
	}
	d, err := y.OpenDir("db")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	d.Close()
	if _, err := y.OpenDir("db/b"); err == nil {
		t.Fatal("opened a file as a directory")
	}

	// Everything survives a clean reopen of the engine.
	want := sortedList(t, y, "db")
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = reopenEngine(t, devName, cfg)
	defer e.Close()
	y = New(e)
	if got := sortedList(t, y, "db"); !slices.Equal(got, want) {
		t.Fatalf("after reopen List(db) = %q, want %q", got, want)
	}
	if got := sortedList(t, y, "db/wal"); !slices.Equal(got, []string{"000001.log", "000003.log"}) {
		t.Fatalf("after reopen List(db/wal) = %q", got)
	}
	if err := y.RemoveAll("db"); err != nil {
		t.Fatal(err)
	}
	if got := sortedList(t, y, ""); len(got) != 0 {
		t.Fatalf("after RemoveAll the root holds %q", got)
	}
	if err := y.RemoveAll("db"); err != nil {
		t.Fatalf("RemoveAll of nothing: %v", err)
	}
	if n := len(e.List()); n != 0 {
		t.Fatalf("%d engine files left after RemoveAll", n)
	}
}

// TestLikeMemFS runs one random sequence of namespace operations on
// pebblefs and on Pebble's own MemFS and wants the same outcomes: which
// calls fail, what every directory lists, what every file holds.
func TestLikeMemFS(t *testing.T) {
	e := formatOpen(t, emuDevice(t, 16, "1M"), 0, testConfig())
	defer e.Close()
	ours, mem := New(e), vfs.NewMem()
	seed := uint64(7)
	if s := os.Getenv("PEBBLEFS_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	dirs := []string{"", "d", "d/e", "f"}
	names := []string{"x", "y", "z"}
	pick := func() string {
		d := dirs[rng.IntN(len(dirs))]
		if rng.IntN(5) == 0 {
			return d
		}
		return mem.PathJoin(d, names[rng.IntN(len(names))])
	}
	for step := range 600 {
		var op string
		var errOurs, errMem error
		switch k := rng.IntN(8); k {
		case 0:
			d := dirs[1+rng.IntN(len(dirs)-1)]
			op = "mkdirall " + d
			errOurs, errMem = ours.MkdirAll(d, 0o755), mem.MkdirAll(d, 0o755)
		case 1, 2:
			n := pick()
			data := bytes.Repeat([]byte{byte(step)}, rng.IntN(5000))
			op = "create " + n
			if isDirIn(mem, n) {
				continue // MemFS replaces the directory, os and pebblefs refuse
			}
			errOurs = writeVia(ours, n, data)
			errMem = writeVia(mem, n, data)
		case 3:
			a, b := pick(), pick()
			op = "rename " + a + " " + b
			if isDirIn(mem, a) || isDirIn(mem, b) || !isDirIn(mem, mem.PathDir(b)) {
				// Directory renames are not supported here (MemFS's
				// moves the tree): Pebble renames files only. MemFS
				// also replaces a directory renamed onto, and loses a
				// file renamed into a missing directory.
				continue
			}
			errOurs, errMem = ours.Rename(a, b), mem.Rename(a, b)
		case 4:
			n := pick()
			op = "remove " + n
			errOurs, errMem = ours.Remove(n), mem.Remove(n)
		case 5:
			n := pick()
			if n == "" {
				continue
			}
			op = "removeall " + n
			errOurs, errMem = ours.RemoveAll(n), mem.RemoveAll(n)
		case 6:
			a, b := pick(), pick()
			op = "reuse " + a + " " + b
			if isDirIn(mem, a) || isDirIn(mem, b) || !isDirIn(mem, mem.PathDir(b)) {
				continue // (MemFS loses a file renamed into a missing directory)
			}
			errOurs = reuseVia(ours, a, b)
			errMem = reuseVia(mem, a, b)
		case 7:
			n := pick()
			op = "openreadwrite " + n
			if isDirIn(mem, n) {
				continue
			}
			errOurs = openRWVia(ours, n)
			errMem = openRWVia(mem, n)
		}
		if (errOurs == nil) != (errMem == nil) {
			t.Fatalf("step %d %s: pebblefs %v, MemFS %v", step, op, errOurs, errMem)
		}
		compareTrees(t, fmt.Sprintf("step %d %s", step, op), ours, mem, dirs, names)
	}
}

func isDirIn(y vfs.FS, name string) bool {
	fi, err := y.Stat(name)
	return err == nil && fi.IsDir()
}

func writeVia(y vfs.FS, name string, data []byte) error {
	f, err := y.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.Sync()
}

func reuseVia(y vfs.FS, a, b string) error {
	f, err := y.ReuseForWrite(a, b, "pebble-wal")
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.Write([]byte("reused"))
	return err
}

func openRWVia(y vfs.FS, name string) error {
	f, err := y.OpenReadWrite(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteAt([]byte("rw"), 3)
	return err
}

func compareTrees(t *testing.T, when string, ours, mem vfs.FS, dirs, names []string) {
	t.Helper()
	for _, d := range dirs {
		lo, eo := ours.List(d)
		lm, em := mem.List(d)
		if (eo == nil) != (em == nil) {
			t.Fatalf("%s: List(%q): pebblefs %v, MemFS %v", when, d, eo, em)
		}
		slices.Sort(lo)
		slices.Sort(lm)
		if !slices.Equal(lo, lm) {
			t.Fatalf("%s: List(%q): pebblefs %q, MemFS %q", when, d, lo, lm)
		}
		for _, n := range names {
			p := mem.PathJoin(d, n)
			fo, eo := ours.Stat(p)
			fm, em := mem.Stat(p)
			if (eo == nil) != (em == nil) {
				t.Fatalf("%s: Stat(%q): pebblefs %v, MemFS %v", when, p, eo, em)
			}
			if em != nil {
				continue
			}
			if fo.IsDir() != fm.IsDir() || (!fm.IsDir() && fo.Size() != fm.Size()) {
				t.Fatalf("%s: Stat(%q): pebblefs dir=%v size=%d, MemFS dir=%v size=%d",
					when, p, fo.IsDir(), fo.Size(), fm.IsDir(), fm.Size())
			}
			if !fm.IsDir() {
				bo, bm := readAllVia(ours, p), readAllVia(mem, p)
				if !bytes.Equal(bo, bm) {
					t.Fatalf("%s: %q differs", when, p)
				}
			}
		}
	}
}

func readAllVia(y vfs.FS, name string) []byte {
	f, err := y.Open(name)
	if err != nil {
		return nil
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	return b
}

func TestReadWriteOffsets(t *testing.T) {
	e := formatOpen(t, emuDevice(t, 16, "1M"), 0, testConfig())
	defer e.Close()
	y := New(e)
	f, err := y.Create("f", "pebble-wal")
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 100000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	// Sequential writes in uneven pieces, as Pebble's buffered writer
	// makes them.
	for off := 0; off < len(data); {
		n := min(len(data)-off, 1+off%4093)
		if w, err := f.Write(data[off : off+n]); err != nil || w != n {
			t.Fatalf("write at %d: %d, %v", off, w, err)
		}
		off += n
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if fi, _ := f.Stat(); fi.Size() != int64(len(data)) {
		t.Fatalf("size %d", fi.Size())
	}
	got := make([]byte, 5000)
	if n, err := f.ReadAt(got, 97000); n != 3000 || err != io.EOF || !bytes.Equal(got[:n], data[97000:]) {
		t.Fatalf("ReadAt at the end: %d, %v", n, err)
	}
	f.Close()
	r, _ := y.Open("f")
	defer r.Close()
	var all []byte
	buf := make([]byte, 777)
	for {
		n, err := r.Read(buf)
		all = append(all, buf[:n]...)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(all, data) {
		t.Fatalf("sequential read: %d bytes, equal %v", len(all), bytes.Equal(all, data))
	}
	if _, err := y.Open("nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("open of a missing file: %v", err)
	}
}

// A handle opened with vfs.SequentialReadsOption (Pebble's compaction
// reads) reads ahead in windows; what it returns is the file's bytes
// wherever the reads go, forwards, backwards or past the end.
func TestSequentialReadahead(t *testing.T) {
	e := formatOpen(t, emuDevice(t, 32, "1M"), 0, testConfig())
	defer e.Close()
	y := New(e)
	data := make([]byte, 3*readaheadSize+12345)
	for i := range data {
		data[i] = byte(i*13 + i>>9)
	}
	mustWrite(t, y, "t.sst", data)
	f, err := y.Open("t.sst", vfs.SequentialReadsOption)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.(*file).ra == nil {
		t.Fatal("no readahead on a sequential handle")
	}
	rng := rand.New(rand.NewPCG(3, 3))
	check := func(off int64, n int) {
		t.Helper()
		p := make([]byte, n)
		got, err := f.ReadAt(p, off)
		want := max(0, min(int64(n), int64(len(data))-off))
		if int64(got) != want || (want < int64(n)) != (err == io.EOF) || (err != nil && err != io.EOF) {
			t.Fatalf("ReadAt(%d bytes at %d) = %d, %v; want %d", n, off, got, err, want)
		}
		if !bytes.Equal(p[:got], data[off:off+int64(got)]) {
			t.Fatalf("ReadAt(%d bytes at %d): wrong bytes", n, off)
		}
	}
	for off := int64(0); off < int64(len(data)); {
		n := 1 + rng.IntN(40000)
		check(off, n)
		off += int64(n)
	}
	for range 200 {
		check(rng.Int64N(int64(len(data))+100), 1+rng.IntN(3*readaheadSize/2))
	}
}

// TestFullDeviceErrorIsReturnedWhole: a write to a full device fails
// with an fs.PathError that names the file and wraps ENOSPC (and logs
// it: Pebble panics on some such errors and the fatal error that follows
// hides them).
func TestFullDeviceErrorIsReturnedWhole(t *testing.T) {
	e := formatOpen(t, emuDevice(t, 8, "1M"), 0, engine.Config{CacheBytes: 8 << 20, DirtyLimit: 1 << 20})
	defer e.Close()
	y := New(e)
	f, err := y.Create("big", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 256<<10)
	for i := 0; i < 64; i++ { // 16 MiB into a device of 8 MiB
		if _, err = f.Write(buf); err != nil {
			break
		}
	}
	var pe *fs.PathError
	if !errors.Is(err, syscall.ENOSPC) || !errors.As(err, &pe) || pe.Path != "big" || pe.Op != "write" {
		t.Fatalf("writing past the device's capacity: %v (%T), want a write PathError on big wrapping ENOSPC", err, err)
	}
}
