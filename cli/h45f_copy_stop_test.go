package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/zonefold/zonefold/engine"
)

// failAfterFirst is a copy's file whose first write lands and every
// later one fails with ENOSPC: a destination that fills up part way
// through a file. (A fake around the real file in DIR: filling a real
// file system here would take a mount the tests cannot make.)
type failAfterFirst struct {
	io.WriterAt
	wrote bool
}

func (f *failAfterFirst) WriteAt(p []byte, off int64) (int, error) {
	if f.wrote {
		return 0, syscall.ENOSPC
	}
	f.wrote = true
	return f.WriterAt.WriteAt(p, off)
}

func (f *failAfterFirst) Close() error { return f.WriterAt.(io.Closer).Close() }

// fullInFirstWriteOf is create, but the copy of name fills its
// destination after its first write (failAfterFirst).
func fullInFirstWriteOf(name string, create func(string, int64) (io.WriterAt, error)) func(string, int64) (io.WriterAt, error) {
	return func(n string, size int64) (io.WriterAt, error) {
		w, err := create(n, size)
		if err != nil || n != name {
			return w, err
		}
		return &failAfterFirst{WriterAt: w}, nil
	}
}

// copyToWriteTwice creates name on e in two records of 8 KiB, "b"s then
// "B"s, fsynced: its copy writes twice.
func copyToWriteTwice(t *testing.T, e *engine.Engine, name string) {
	t.Helper()
	copyToWrite(t, e, name, bytes.Repeat([]byte("b"), 8192))
	f, err := e.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(bytes.Repeat([]byte("B"), 8192), 8192); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// TestH45fCopyThatStopsLeavesNoPartFile: a copy that stopped part way
// through a file (the destination full) left that file in DIR at its
// full size (created sized), its first bytes copied and the rest zeros:
// in DIR it looked like a whole copy, and the help said DIR holds at
// most what the report says was copied. The part copied is removed; DIR
// holds exactly the files copied whole before it.
func TestH45fCopyThatStopsLeavesNoPartFile(t *testing.T) {
	_, devName, e := copyToDevice(t)
	a := bytes.Repeat([]byte("a"), 3*4096+100)
	// b spans two records, so its copy writes twice.
	copyToWrite(t, e, "a", a)
	copyToWriteTwice(t, e, "b")
	copyToWrite(t, e, "c", []byte("data of c"))
	dev, root, dirs, dir := copyToOpen(t, e, devName)
	var out bytes.Buffer
	err := salvageInto(&out, devName, dev, fullInFirstWriteOf("b", createIn(root, dirs)), finishCopy(root, dirs), dir, false)
	if err == nil || !strings.Contains(err.Error(), "stopped after 1 file") || !strings.Contains(err.Error(), `"b"`) {
		t.Fatalf("a copy that fills its destination part way through b: error %v, want it stopped after 1 file, naming b\n%s", err, out.String())
	}
	if fsckStatus(err).(*statusError).status != exitNotChecked {
		t.Errorf("exit status %d, want %d", fsckStatus(err).(*statusError).status, exitNotChecked)
	}
	if fi, err := os.Stat(filepath.Join(dir, "b")); err == nil {
		t.Errorf("DIR holds b (%d bytes), part copied, as if whole; the report says 1 file copied\n%s", fi.Size(), out.String())
	}
	copyToCheck(t, dir, map[string][]byte{"a": a})
}

// TestH45fFileDIRCannotSizeIsNotLeftEmpty: a file whose copy DIR could
// not size (over the file size limit, RLIMIT_FSIZE, as a quota would
// be) is NOT COPIED, exit 4, but was left in DIR empty under its name.
// From the real binary under sh's ulimit -f.
func TestH45fFileDIRCannotSizeIsNotLeftEmpty(t *testing.T) {
	_, devName, e := copyToDevice(t)
	big := bytes.Repeat([]byte("big....."), 16<<10) // 128 KiB
	copyToWrite(t, e, "big", big)
	copyToWrite(t, e, "small", []byte("data of small"))
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "copy")
	copyToUnderFileLimit(t, devName, dir, "big")
	copyToCheck(t, dir, map[string][]byte{"small": []byte("data of small")})
}

// TestH45fDamagedButAllCopiedKeepsDIR: exit 1 says every file recovery
// found was copied whole to DIR, but when there were none the DIR fsck
// had made was removed again (as after a device that does not open), so
// the DIR the message names was not there. A lost zone table (damage)
// on a file system with no files.
func TestH45fDamagedButAllCopiedKeepsDIR(t *testing.T) {
	path, devName, e := copyToDevice(t)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	loseZoneTable(t, path)
	dir := filepath.Join(t.TempDir(), "copy")
	code, out := copyToRun("fsck", devName, "--copy-to", dir)
	if code != exitDamaged || !strings.Contains(out, "copied 0 files") {
		t.Fatalf("fsck --copy-to of a lost table holding no files: exit %d, want %d\n%s", code, exitDamaged, out)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Errorf("exit %d says the files were copied to %s, but: %v\n%s", code, dir, err, out)
	}
}

// copyToUnderFileLimit runs the real binary's fsck devName --copy-to dir
// under sh's ulimit -f of 64 KiB (RLIMIT_FSIZE), and fails t unless it
// exits 4 with big, a file over that, NOT COPIED. It returns the output.
func copyToUnderFileLimit(t *testing.T, devName, dir, big string) string {
	t.Helper()
	// 128 blocks of 512 bytes (sh's unit): 64 KiB.
	cmd := exec.Command("sh", "-c", `ulimit -f 128 && exec "$0" "$@"`, zonefoldBinary(t), "fsck", devName, "--copy-to", dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitCopyIncomplete || !strings.Contains(out.String(), fmt.Sprintf("NOT COPIED: file %q", big)) {
		t.Fatalf("fsck --copy-to with a file over the size limit: %v, want exit %d and %s NOT COPIED\n%s", err, exitCopyIncomplete, big, out.String())
	}
	return out.String()
}
