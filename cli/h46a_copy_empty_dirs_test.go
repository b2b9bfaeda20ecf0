package cli

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/zonefold/zonefold/engine"
)

// h46aEmptyDirs is every directory below dir (not dir itself) that
// holds nothing.
func h46aEmptyDirs(t *testing.T, dir string) []string {
	t.Helper()
	var empty []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || p == dir {
			return err
		}
		names, err := os.ReadDir(p)
		if err == nil && len(names) == 0 {
			rel, _ := filepath.Rel(dir, p)
			empty = append(empty, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return empty
}

// TestH46aStopLeavesNoEmptyDirectory: a signal that stopped fsck
// --copy-to in a file whose copy had made a new subdirectory for it
// removed the file but left the subdirectory, empty, in DIR: a
// directory the report accounts for nothing in. Now the directories the
// copy made for the file it stopped in are removed when they hold
// nothing, deepest first; one that holds a file copied before is kept.
// The signal is the context's cancel (as Main's loop does it), between
// d/a and d/e/x: d/e/x is begun after it, made in a new d/e.
func TestH46aStopLeavesNoEmptyDirectory(t *testing.T) {
	_, devName, e := copyToDevice(t)
	copyToWrite(t, e, "a", []byte("data of a"))
	copyToWrite(t, e, "d/a", []byte("data of d/a"))
	copyToWrite(t, e, "d/e/f/x", []byte("data of d/e/f/x"))
	copyToWrite(t, e, "z", []byte("data of z"))
	dev, root, dirs, dir := copyToOpen(t, e, devName)
	out, err := copyStoppedIn(devName, dev, root, dirs, dir, "d/e/f/x", false)
	if !errors.Is(err, context.Canceled) || !strings.Contains(out, `interrupted: the copy stopped in "d/e/f/x"`) {
		t.Fatalf("copy interrupted before d/e/f/x: err %v, report\n%s", err, out)
	}
	copyToCheck(t, dir, map[string][]byte{"a": []byte("data of a"), "d/a": []byte("data of d/a")})
	if empty := h46aEmptyDirs(t, dir); len(empty) > 0 {
		t.Errorf("after a stop in d/e/f/x, DIR holds the empty directories %q it made for it\n%s", empty, out)
	}
	// The report names what it did not copy: the file it stopped in
	// and z after it (engine.Salvage lists both), 2 + 2 of 4 files.
	for _, line := range []string{`NOT COPIED: file "d/e/f/x" (15 B): `, `NOT COPIED: file "z" (9 B): the copy stopped before it (in "d/e/f/x")`,
		"copied 2 files (20 B) to " + dir + "; 0 ranges not recovered, 2 files not copied\n"} {
		if !strings.Contains(out, line) {
			t.Errorf("the report of a copy stopped in d/e/f/x lacks %q:\n%s", line, out)
		}
	}
}

// TestH46aFullDIRLeavesNoEmptyDirectory: a copy stopped by a full
// destination (ENOSPC part way through a file, the fake of
// h45f) in a file in a new subdirectory left that subdirectory empty.
func TestH46aFullDIRLeavesNoEmptyDirectory(t *testing.T) {
	_, devName, e := copyToDevice(t)
	a := bytes.Repeat([]byte("a"), 3*4096+100)
	copyToWrite(t, e, "a", a)
	copyToWriteTwice(t, e, "n/m/b")
	dev, root, dirs, dir := copyToOpen(t, e, devName)
	var out bytes.Buffer
	err := salvageInto(&out, devName, dev, fullInFirstWriteOf("n/m/b", createIn(root, dirs)), finishCopy(root, dirs), dir, false)
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), `"n/m/b"`) {
		t.Fatalf("a copy that fills its destination part way through n/m/b: error %v, want ENOSPC naming it\n%s", err, out.String())
	}
	copyToCheck(t, dir, map[string][]byte{"a": a})
	if empty := h46aEmptyDirs(t, dir); len(empty) > 0 {
		t.Errorf("after the copy stopped in n/m/b, DIR holds the empty directories %q it made for it", empty)
	}
}

// TestH46aFileDIRCannotSizeLeavesNoEmptyDirectory: a file NOT COPIED
// because DIR could not size it (over RLIMIT_FSIZE, as in h45f) was
// removed, but the new subdirectory made for it was left empty. From
// the real binary under sh's ulimit -f; the copy goes on past it.
func TestH46aFileDIRCannotSizeLeavesNoEmptyDirectory(t *testing.T) {
	_, devName, e := copyToDevice(t)
	copyToWrite(t, e, "sub/dir/big", bytes.Repeat([]byte("big....."), 16<<10)) // 128 KiB
	copyToWrite(t, e, "sub/small", []byte("data of sub/small"))
	copyToWrite(t, e, "z", []byte("data of z"))
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "copy")
	out := copyToUnderFileLimit(t, devName, dir, "sub/dir/big")
	copyToCheck(t, dir, map[string][]byte{"sub/small": []byte("data of sub/small"), "z": []byte("data of z")})
	if empty := h46aEmptyDirs(t, dir); len(empty) > 0 {
		t.Errorf("after sub/dir/big was NOT COPIED, DIR holds the empty directories %q made for it\n%s", empty, out)
	}
}

// TestH46aSignalInANewSubdirectoryLeavesNoEmptyDirectory: the real
// binary, a real emu device and a real DIR, as h45k: one SIGINT, sent
// while d/big (in a new subdirectory d) is part copied and fsck is
// frozen (SIGSTOP, state T, so that it is known to be alive to take
// it), stopped the copy, removed d/big, and left d empty in DIR. If fsck
// finished before it could be frozen (a fast machine), the copy must be
// whole, exit 0; no timing decides what is checked.
func TestH46aSignalInANewSubdirectoryLeavesNoEmptyDirectory(t *testing.T) {
	_, devName, e := copyToDeviceWith(t, h45kGeometry)
	want := map[string][]byte{
		"a":     h45kData("a", 3*4096+100),
		"d/big": h45kData("d/big", h45kBig),
	}
	for _, name := range []string{"a", "d/big"} {
		copyToWrite(t, e, name, want[name])
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "copy")
	frozen, status, out, errOut := signalDuringCopy(t, devName, dir, "d/big", want["d/big"][:4096], syscall.SIGINT)
	if !frozen {
		t.Logf("fsck --copy-to exited before the signal (the copy ran to its end)")
		if status != 0 {
			t.Errorf("fsck --copy-to not signalled: exit %d, stdout %q, stderr %q; want 0", status, out, errOut)
		}
		copyToCheck(t, dir, want)
		return
	}
	if status != exitSignal(syscall.SIGINT) {
		t.Errorf("one SIGINT during the copy: exit %d, stdout %q, stderr %q; want %d", status, out, errOut, exitSignal(syscall.SIGINT))
	}
	if !strings.Contains(out, `interrupted: the copy stopped in "d/big"`) {
		// The signal reached fsck after d/big was copied.
		t.Logf("the signal missed d/big: stdout %q", out)
		copyToCheck(t, dir, want)
		return
	}
	copyToCheck(t, dir, map[string][]byte{"a": want["a"]})
	if empty := h46aEmptyDirs(t, dir); len(empty) > 0 {
		t.Errorf("after a SIGINT stopped the copy in d/big, DIR holds the empty directories %q it made for it\n%s", empty, out)
	}
}

// TestH46aStoppedFileHasNoHoleReported: a copy stopped (DIR full) in a
// file past a damaged block of it must not report that block as NOT
// RECOVERED, "left a hole (zeros)": the file is not kept, and the report
// lists it NOT COPIED, as a whole.
func TestH46aStoppedFileHasNoHoleReported(t *testing.T) {
	path, devName, e := copyToDevice(t)
	copyToWrite(t, e, "f", bytes.Repeat([]byte("hole...."), 8<<10))
	g := zoneGeometry(t, devName)
	// f's only record: at the first data zone's start, after its
	// header; its third block damaged, so that its copy writes the
	// two before it, then (DIR full) fails on the rest.
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	copyToPatch(t, devName, path, 2*g.ZoneSize+engine.BlockSize+2*engine.BlockSize+7, []byte("garbage"))
	dev, root, dirs, dir := copyToOpen(t, nil, devName)
	var out bytes.Buffer
	err := salvageInto(&out, devName, dev, fullInFirstWriteOf("f", createIn(root, dirs)), finishCopy(root, dirs), dir, false)
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(out.String(), `NOT COPIED: file "f" (64 KiB): `) {
		t.Fatalf("a copy that fills DIR in f, past its damaged block: error %v, want ENOSPC and f NOT COPIED\n%s", err, out.String())
	}
	if strings.Contains(out.String(), "NOT RECOVERED") {
		t.Errorf("the report of f, not kept, names a range of it NOT RECOVERED, a hole in a file DIR does not hold:\n%s", out.String())
	}
	copyToCheck(t, dir, nil)
}
