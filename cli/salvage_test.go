package cli

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/zns"
)

// copyToRun runs zonefold in-process.
func copyToRun(args ...string) (int, string) {
	var out, errOut bytes.Buffer
	code := Main(args, &out, &errOut)
	return code, out.String() + errOut.String()
}

// copyToDevice formats an emu device and opens an engine on it.
func copyToDevice(t *testing.T) (string, string, *engine.Engine) {
	t.Helper()
	return copyToDeviceOf(t, "zone_size=1M&zones=16")
}

// copyToDeviceOf is copyToDevice of the emu geometry geo.
func copyToDeviceOf(t *testing.T, geo string) (string, string, *engine.Engine) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dev")
	devName := fmt.Sprintf("emu:%s?%s", path, geo)
	if code, out := copyToRun("format", devName); code != 0 {
		t.Fatalf("format: %d %s", code, out)
	}
	e, err := engine.Open(devName, engine.Config{CacheBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return path, devName, e
}

// copyToWrite creates name holding data on e, fsynced.
func copyToWrite(t *testing.T, e *engine.Engine, name string, data []byte) {
	t.Helper()
	f, err := e.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// copyToPatch writes p at device offset off of the emu device at path.
func copyToPatch(t *testing.T, devName, path string, off int64, p []byte) {
	t.Helper()
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	at := dev.(*zns.Emu).FileOffset(off)
	dev.Close()
	fh, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.WriteAt(p, at); err != nil {
		t.Fatal(err)
	}
}

// copyToCheck fails the test unless dir holds exactly want.
func copyToCheck(t *testing.T, dir string, want map[string][]byte) {
	t.Helper()
	n := 0
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		n++
		rel, _ := filepath.Rel(dir, p)
		b, ok := want[filepath.ToSlash(rel)]
		if !ok {
			t.Errorf("%s copied, not wanted", rel)
			return nil
		}
		got, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, b) {
			t.Errorf("%s: %d bytes, want %d (equal: %v)", rel, len(got), len(b), bytes.Equal(got, b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != len(want) {
		t.Errorf("%d files copied, want %d", n, len(want))
	}
}

// A healthy device: fsck --copy-to copies every file byte for byte,
// names with '/' as subdirectories, exits 0; --json says what it copied.
func TestFsckCopyToHealthyDevice(t *testing.T) {
	_, devName, e := copyToDevice(t)
	rng := rand.New(rand.NewSource(43))
	want := map[string][]byte{}
	for i, name := range []string{"top", "dir/a", "dir/sub/b", "dir/sub/c d", "empty"} {
		b := make([]byte, i*123457%(700<<10))
		rng.Read(b)
		copyToWrite(t, e, name, b)
		want[name] = b
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "copy") // missing: created
	code, out := copyToRun("fsck", devName, "--copy-to", dir)
	if code != 0 || !strings.Contains(out, "clean") || !strings.Contains(out, "copied 5 files") {
		t.Fatalf("fsck --copy-to of a healthy device: exit %d\n%s", code, out)
	}
	copyToCheck(t, dir, want)

	dir2 := t.TempDir() // empty: taken
	code, out = copyToRun("fsck", devName, "--copy-to", dir2, "--json")
	if code != 0 || !strings.Contains(out, `"copied": 5`) || !strings.Contains(out, `"not_recovered": []`) {
		t.Fatalf("fsck --copy-to --json: exit %d\n%s", code, out)
	}
	copyToCheck(t, dir2, want)
}

// A non-empty DIR is refused before anything is read or written; names
// that would leave DIR are not copied (reported, exit 4), and nothing
// lands outside it.
func TestFsckCopyToRefusesNonEmptyDirAndEscapingNames(t *testing.T) {
	_, devName, e := copyToDevice(t)
	for _, name := range []string{"../escaped", "/abs", "a/../../up", "ok", "sub//x", "."} {
		copyToWrite(t, e, name, []byte("data of "+name))
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	dir := filepath.Join(base, "in", "copy")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "there"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := copyToAfterRefusingNonEmpty(t, devName, dir, "there")
	if code != exitCopyIncomplete || strings.Count(out, "NOT COPIED") != 5 {
		t.Fatalf("fsck --copy-to with names that leave DIR: exit %d, want %d, and 5 NOT COPIED lines\n%s", code, exitCopyIncomplete, out)
	}
	copyToCheck(t, dir, map[string][]byte{"ok": []byte("data of ok")})
	var outside []string
	filepath.Walk(base, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && !strings.HasPrefix(p, dir+string(filepath.Separator)) {
			outside = append(outside, p)
		}
		return nil
	})
	if len(outside) > 0 || exists("/abs") {
		t.Errorf("files outside DIR: %q", outside)
	}
}

// A damaged data block: the file is copied with a hole (zeros) there,
// the report says NOT RECOVERED with the range, and fsck exits 4.
func TestFsckCopyToDamagedBlockIsAHole(t *testing.T) {
	path, devName, e := copyToDevice(t)
	data := bytes.Repeat([]byte("hole...."), 8<<10)
	copyToWrite(t, e, "f", data)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	// f's only record: at the first data zone's start, after its header.
	g := zoneGeometry(t, devName)
	copyToPatch(t, devName, path, 2*g.ZoneSize+engine.BlockSize+2*engine.BlockSize+7, []byte("garbage"))
	dir := filepath.Join(t.TempDir(), "copy")
	code, out := copyToRun("fsck", devName, "--copy-to", dir)
	want := append([]byte(nil), data...)
	clear(want[2*engine.BlockSize : 3*engine.BlockSize])
	if code != exitCopyIncomplete || !strings.Contains(out, fmt.Sprintf(`NOT RECOVERED: file "f": bytes %d..%d`, 2*engine.BlockSize, 3*engine.BlockSize)) {
		t.Fatalf("fsck --copy-to with a damaged block: exit %d, want %d\n%s", code, exitCopyIncomplete, out)
	}
	copyToCheck(t, dir, map[string][]byte{"f": want})
}

// The newest checkpoint damaged, a create logged after it: zonefold
// serve would refuse the device, and plain fsck, which recovers as Open
// does, checks nothing past the refusal: exit 8. fsck --copy-to copies
// what the older checkpoint holds, says what it went past, and exits 1
// (damage, but every file it holds copied whole).
func TestFsckCopyToDamagedNewestCheckpoint(t *testing.T) {
	path, devName, e := copyToDevice(t)
	keep := bytes.Repeat([]byte("kept...."), 5000)
	copyToWrite(t, e, "keep", keep)
	if err := e.Close(); err != nil { // a checkpoint
		t.Fatal(err)
	}
	// Recovery's checkpoint goes to the other metadata half; the create
	// of "later" is logged after it, and the engine is abandoned there
	// (as a killed process: no Close, no checkpoint after).
	e, err := engine.Open(devName, engine.Config{CacheBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	copyToWrite(t, e, "later", []byte("later"))
	sb := e.Superblock()
	g := e.Geometry()
	// The newest checkpoint is the first record of the half whose first
	// record is numbered higher.
	newest, top := int64(-1), uint64(0)
	for _, mz := range sb.MetaZones {
		at := int64(mz)*g.ZoneSize + engine.BlockSize
		dev, err := zns.Open(devName, zns.Options{})
		if err != nil {
			t.Fatal(err)
		}
		fo := dev.(*zns.Emu).FileOffset(at)
		dev.Close()
		hdr := make([]byte, 16)
		fh, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		fh.ReadAt(hdr, fo)
		fh.Close()
		if seq := binary.LittleEndian.Uint64(hdr[8:]); seq > top {
			newest, top = at, seq
		}
	}
	copyToPatch(t, devName, path, newest+40, []byte("garbage"))
	// Plain fsck: recovery refuses, so nothing past the metadata log
	// was checked (exit 8, as the help and README say), which a
	// script must not take for damage found in a file system fsck
	// checked (1). It exited 1.
	if code, out := copyToRun("fsck", devName); code != exitNotChecked || !strings.Contains(out, "refusing to open") ||
		!strings.Contains(out, "could not check") {
		t.Fatalf("plain fsck of a device recovery refuses: exit %d, want %d, the refusal and that it could not check\n%s", code, exitNotChecked, out)
	}
	dir := filepath.Join(t.TempDir(), "copy")
	code, out := copyToRun("fsck", devName, "--copy-to", dir)
	if code != exitDamaged || !strings.Contains(out, "salvaged past a refusal") || !strings.Contains(out, "copied 1 file") {
		t.Fatalf("fsck --copy-to past a damaged newest checkpoint: exit %d, want %d\n%s", code, exitDamaged, out)
	}
	copyToCheck(t, dir, map[string][]byte{"keep": keep})
}

// zoneGeometry is devName's geometry.
func zoneGeometry(t *testing.T, devName string) zns.Geometry {
	t.Helper()
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	return dev.Geometry()
}

// Nothing verifies (the only record's header is damaged): fsck exits 4,
// lists the whole file as NOT RECOVERED, and its summary does not claim
// the hole's bytes as copied.
func TestFsckCopyToNothingVerifiedClaimsNoBytes(t *testing.T) {
	path, devName, e := copyToDevice(t)
	copyToWrite(t, e, "f", bytes.Repeat([]byte("nothing."), 8<<10))
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	g := zoneGeometry(t, devName)
	copyToPatch(t, devName, path, 2*g.ZoneSize+3, []byte("garbage")) // f's record's header
	dir := filepath.Join(t.TempDir(), "copy")
	code, out := copyToRun("fsck", devName, "--copy-to", dir)
	if code != exitCopyIncomplete || !strings.Contains(out, `NOT RECOVERED: file "f": bytes 0..65536`) {
		t.Fatalf("fsck --copy-to with nothing verifiable: exit %d, want %d\n%s", code, exitCopyIncomplete, out)
	}
	if !strings.Contains(out, "(0 B) to "+dir) {
		t.Errorf("the summary claims bytes copied when none verified:\n%s", out)
	}
	copyToCheck(t, dir, map[string][]byte{"f": make([]byte, 64<<10)})
}

// Names DIR cannot hold as given: a file that is also another's
// directory ('a' and 'a/b') is NOT COPIED with why, the rest copied,
// nothing lands outside DIR; a DIR holding only a symlink (to outside)
// is refused. (The engine refuses a name with a NUL or over 255 bytes,
// so none reaches DIR; the test tries them in case that changes.)
func TestFsckCopyToNamesDirCannotHold(t *testing.T) {
	_, devName, e := copyToDevice(t)
	long := strings.Repeat("n", 300)
	names := []string{"a", "a/b", "nul\x00x", long, "ok/" + long + "/x"}
	var made []string
	for _, name := range append(names, "z") {
		f, err := e.Create(name)
		if err != nil {
			t.Logf("the engine refuses %q: %v", name, err)
			continue
		}
		f.Close()
		made = append(made, name)
		copyToWrite(t, e, name, []byte("data of "+name))
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	dir := filepath.Join(base, "copy")
	outside := filepath.Join(base, "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	code, out := copyToAfterRefusingNonEmpty(t, devName, dir, "a")
	notCopied := strings.Count(out, "NOT COPIED")
	if code != exitCopyIncomplete || notCopied != len(made)-2 {
		t.Fatalf("exit %d, %d NOT COPIED, want %d and %d (made %q)\n%s", code, notCopied, exitCopyIncomplete, len(made)-2, made, out)
	}
	if want := `NOT COPIED: file "a/b" (11 B): "a" is a file in ` + dir + `, so "a/b" cannot be made under it`; !strings.Contains(out, want) {
		t.Errorf("the report does not say why a/b was not copied: want %q\n%s", want, out)
	}
	copyToCheck(t, dir, map[string][]byte{"a": []byte("data of a"), "z": []byte("data of z")})
	if ents, _ := os.ReadDir(outside); len(ents) > 0 {
		t.Errorf("files outside DIR: %v", ents)
	}
}

// An emu device whose zone table reads as zeros (both header slots, at
// the file's start, damaged to zeros) and whose device string gives the
// geometry: fsck and fsck --copy-to refuse it and leave the file as it
// was. zns.Open took a blank header for a new device and wrote a fresh
// table over it, every zone empty, losing what the table said of the
// data still there.
func TestFsckBlankEmuTableWritesNothing(t *testing.T) {
	path, devName := lostTableDevice(t)
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"fsck", devName}, {"fsck", devName, "--copy-to", filepath.Join(t.TempDir(), "copy")}} {
		code, out := copyToRun(args...)
		after, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(after, before) {
			t.Fatalf("%q wrote the device (exit %d)\n%s", args, code, out)
		}
		if code == 0 {
			t.Errorf("%q: exit 0 on a device with no zone table\n%s", args, out)
		}
	}
}

// copyToAfterRefusingNonEmpty runs fsck --copy-to DIR on devName while
// DIR holds entry (a file, a symlink: anything makes it non-empty),
// fails the test unless that is refused (exit 8, "not empty"), then
// removes entry and runs it again, returning that run's exit status and
// output.
func copyToAfterRefusingNonEmpty(t *testing.T, devName, dir, entry string) (int, string) {
	t.Helper()
	code, out := copyToRun("fsck", devName, "--copy-to", dir)
	if code != exitNotChecked || !strings.Contains(out, "not empty") {
		t.Fatalf("fsck --copy-to a DIR holding %s: exit %d, want %d and \"not empty\"\n%s", entry, code, exitNotChecked, out)
	}
	if err := os.Remove(filepath.Join(dir, entry)); err != nil {
		t.Fatal(err)
	}
	return copyToRun("fsck", devName, "--copy-to", dir)
}

// zonefold's names are flat, so 'a' and 'a/b' can both be files; DIR
// cannot hold both. The one created second is NOT COPIED with why, in
// words: which name is a file (or a directory) in DIR, that names are
// flat, and how to copy it instead. It said "mkdirat a: file exists".
func TestFsckCopyToFlatNameClashSaysWhy(t *testing.T) {
	for _, tc := range []struct {
		first, then string
		want        []string
	}{
		{"a", "a/b", []string{`"a" is a file in DIR, so "a/b" cannot be made under it`}},
		{"a", "a/b/c", []string{`"a" is a file in DIR, so "a/b/c" cannot be made under it`}},
		{"a/b", "a/b/c", []string{`"a/b" is a file in DIR, so "a/b/c" cannot be made under it`}},
		{"a/b", "a", []string{`"a" is a directory in DIR (holding "a/b"), so the file "a" cannot be made there`}},
		{"a/b/c", "a/b", []string{`"a/b" is a directory in DIR (holding "a/b/c"), so the file "a/b" cannot be made there`}},
		{"a/b/c", "a", []string{`"a" is a directory in DIR (holding "a/b"), so the file "a" cannot be made there`}},
		{"x y", "x y/z", []string{`"x y" is a file in DIR`, `zonefold get 'x y/z' LOCAL`}},
	} {
		dir := filepath.Join(t.TempDir(), "DIR")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		root, err := os.OpenRoot(dir)
		if err != nil {
			t.Fatal(err)
		}
		create := createIn(root, copyDirs{})
		w, err := create(tc.first, 1)
		if err != nil {
			t.Fatalf("create %q: %v", tc.first, err)
		}
		w.(io.Closer).Close()
		_, err = create(tc.then, 1)
		root.Close()
		if err == nil {
			t.Errorf("%q after %q: created", tc.then, tc.first)
			continue
		}
		msg := strings.ReplaceAll(err.Error(), dir, "DIR")
		get := tc.then
		if strings.Contains(get, " ") {
			get = "'" + get + "'"
		}
		for _, w := range append(tc.want, "zonefold names are flat", "copy it with: zonefold get "+get+" LOCAL") {
			if !strings.Contains(msg, w) {
				t.Errorf("%q after %q: %q, want it to say %q", tc.then, tc.first, msg, w)
			}
		}
	}
}
