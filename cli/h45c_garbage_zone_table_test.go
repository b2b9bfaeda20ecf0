package cli

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// An emu device whose two header slots hold random bytes (a stray dd
// over the file's start), not zeros, lost its zone table as one whose
// slots read as zeros, and every command treats it so: those that only
// open it (serve, zones, fsck), format without --force and bench run
// --force refuse it, exit 1, name the file, the zonefold superblock
// that shows it is a device, and the ways on, and leave it as it was;
// fsck --copy-to salvages it; format --force starts it over. They said
// "holds no emulated-device header: it is not an emu device (format=1
// overwrites it)": the one way on named erased the data, and fsck
// --copy-to refused it too. A file that is no device at all is refused
// by every command, format --force and fsck --copy-to included, and is
// never written.

// garbageTableDevice is lostTableDevice with random bytes over both
// header slots instead of zeros.
func garbageTableDevice(t *testing.T) (path, devName string) {
	t.Helper()
	path, devName = lostTableDevice(t)
	garbage := make([]byte, 2*4096) // both slots of 16 zones
	rand.New(rand.NewSource(45)).Read(garbage)
	garbage[0] = 'z' // not the emu magic's 'Z'
	patchFileAt(t, path, 0, garbage)
	return path, devName
}

// patchFileAt writes p at off of the file at path.
func patchFileAt(t *testing.T, path string, off int64, p []byte) {
	t.Helper()
	fh, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = fh.WriteAt(p, off)
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

// refusedUnchanged runs args (an arg DEV is devName, SOCK a socket,
// COPY a directory) on the file at path and checks that it is refused
// (exit 1, one error line with each of wants), writes nothing, makes
// no COPY and prints nothing on stdout.
func refusedUnchanged(t *testing.T, path, devName string, args []string, wants ...string) {
	t.Helper()
	dir := t.TempDir()
	args = slices.Clone(args)
	for i, a := range args {
		args[i] = map[string]string{"DEV": devName, "SOCK": filepath.Join(dir, "zf.sock"), "COPY": filepath.Join(dir, "copy")}[a]
		if args[i] == "" {
			args[i] = a
		}
	}
	defer func() {
		if _, err := os.Stat(filepath.Join(dir, "copy")); err == nil {
			t.Errorf("%q made the copy directory", args)
		}
	}()
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r, served := runServeOrRefusal(t, args...)
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(after, before) {
		t.Errorf("%q wrote the file (exit %d, served %v)\n%s", args, r.status, served, r.stderr)
	}
	want := exitFailure
	if args[0] == "fsck" {
		want = exitNotChecked // fsck's own statuses: a device it cannot open is not checked
	}
	if served || r.status != want {
		t.Fatalf("%q: exit %d (served %v), want %d\nstdout %q\nstderr %q", args, r.status, served, want, r.stdout, r.stderr)
	}
	checkErrorLine(t, args, r.stderr)
	for _, want := range wants {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("%q: stderr %q does not say %q", args, r.stderr, want)
		}
	}
	if r.stdout != "" {
		t.Errorf("%q refused but printed %q", args, r.stdout)
	}
}

func TestGarbageZoneTableIsRefused(t *testing.T) {
	for _, args := range [][]string{
		{"zones", "report", "DEV"},
		{"zones", "reset", "DEV", "--all", "--force"},
		{"format", "DEV"},
		{"fsck", "DEV"},
		{"serve", "DEV", "--socket", "SOCK"},
		{"serve", "DEV", "--format", "--socket", "SOCK"},
		{"bench", "run", "DEV", "--force", "--size", "1M"},
	} {
		t.Run(strings.Join(args, "_"), func(t *testing.T) {
			path, devName := garbageTableDevice(t)
			refusedUnchanged(t, path, devName, args, path, "its zone table is lost", "both hold bytes that fail their checks",
				"a zonefold superblock starts zone 0", "`zonefold fsck DEVICE --copy-to DIR`", "`zonefold format --force DEVICE` erases it")
		})
	}
}

// fsck --copy-to copies the file off, from the device as it was left
// and from a copy with every block allocated; format --force starts it
// over.
func TestGarbageZoneTableSalvageAndFormatForce(t *testing.T) {
	want := bytes.Repeat([]byte("lost table"), 3000)
	for _, noHoles := range []bool{false, true} {
		t.Run(fmt.Sprintf("noHoles=%v", noHoles), func(t *testing.T) {
			path, devName := garbageTableDevice(t)
			if noHoles {
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				patchFileAt(t, path, 0, b) // every block written: no hole
			}
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(t.TempDir(), "copy")
			code, out := copyToRun("fsck", devName, "--copy-to", dir)
			if code != exitFailure || !strings.Contains(out, "DAMAGE: the device's zone table is lost") || !strings.Contains(out, "copied 1 file (") {
				t.Errorf("fsck --copy-to: exit %d, want %d, the lost table and the file copied:\n%s", code, exitFailure, out)
			}
			if got, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || !bytes.Equal(got, want) {
				t.Errorf("copy of f: %d bytes, err %v; want its %d bytes", len(got), err, len(want))
			}
			if after, err := os.ReadFile(path); err != nil || !bytes.Equal(after, before) {
				t.Errorf("fsck --copy-to wrote the device (%v)", err)
			}
			if code, out := copyToRun("format", devName, "--force"); code != exitOK {
				t.Fatalf("format --force: exit %d\n%s", code, out)
			}
			if code, out := copyToRun("fsck", devName); code != exitOK || !strings.Contains(out, "clean") || !strings.Contains(out, "0 files") {
				t.Fatalf("fsck after format --force: exit %d\n%s", code, out)
			}
		})
	}
}

// A file that is no device (random bytes of the geometry's size) is
// refused by every command, format --force and fsck --copy-to too, and
// not written.
func TestNotADeviceIsRefusedByEveryCommand(t *testing.T) {
	for _, args := range [][]string{
		{"zones", "report", "DEV"},
		{"format", "DEV"},
		{"format", "DEV", "--force"},
		{"fsck", "DEV"},
		{"fsck", "DEV", "--copy-to", "COPY"},
		{"serve", "DEV", "--socket", "SOCK"},
		{"bench", "run", "DEV", "--force", "--size", "1M"},
	} {
		t.Run(strings.Join(args, "_"), func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "not-a-device")
			b := make([]byte, 17<<20)
			rand.New(rand.NewSource(46)).Read(b)
			b[0] = 'z'
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			devName := fmt.Sprintf("emu:%s?zone_size=1M&zones=16", path)
			refusedUnchanged(t, path, devName, args, path, "is not an emu device", "a zonefold superblock", "nothing was written")
		})
	}
}
