package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// h46aNeedRoot skips t where it is not root (mounting a file system
// needs it), with why, but fails it where CI=true or
// ZONEFOLD_REQUIRE_ROOT is set: CI runs as root, and a test skipped
// there would hide that it never ran.
func h46aNeedRoot(t *testing.T, why string) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" || os.Getenv("ZONEFOLD_REQUIRE_ROOT") != "" {
		t.Fatalf("not root (euid %d), but CI=true or ZONEFOLD_REQUIRE_ROOT is set: %s needs root", os.Geteuid(), why)
	}
	t.Skipf("not root (euid %d): %s needs root (CI runs it as root)", os.Geteuid(), why)
}

// h46aTmpfs mounts a tmpfs with options opts (such as "size=512k") at a
// new directory for the test, unmounted at its end, and returns it.
func h46aTmpfs(t *testing.T, opts string) string {
	t.Helper()
	h46aNeedRoot(t, "mounting a small tmpfs to fill")
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, opts); err != nil {
		t.Fatalf("mount a tmpfs (%s) at %s as root: %v", opts, dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount the tmpfs at %s: %v", dir, err)
		}
	})
	return dir
}

// TestH46aCopyToAFullFileSystem: fsck --copy-to into a real file system
// too small for the device's files (a 512 KiB tmpfs; 2 MiB to copy)
// stops part way with ENOSPC: exit 8, "copy stopped part way". DIR then
// holds exactly the files the report counts, each whole; not the one it
// stopped in (created sized, it would read as whole), nor the new
// subdirectory made for it. The report named neither the file the copy
// stopped in nor those after it (only stderr named the first): it
// counted 1 file copied, none not copied, of the 3 its first lines
// counted. Now each is NOT COPIED with why, and copied plus not copied
// is every file, in the text and the --json report.
func TestH46aCopyToAFullFileSystem(t *testing.T) {
	mnt := h46aTmpfs(t, "size=512k")
	_, devName, e := copyToDeviceWith(t, "zone_size=1M&zones=16")
	want := map[string][]byte{
		"a":     h45kData("a", 64<<10),
		"b/big": h45kData("b/big", 2<<20),
		"c":     h45kData("c", 8<<10),
	}
	for _, name := range []string{"a", "b/big", "c"} {
		copyToWrite(t, e, name, want[name])
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	for _, asJSON := range []bool{false, true} {
		dir := filepath.Join(mnt, fmt.Sprintf("copy-json-%v", asJSON))
		args := []string{"fsck", devName, "--copy-to", dir}
		if asJSON {
			args = append(args, "--json")
		}
		r := runBinary(t, args...)
		status, out, errOut := r.status, r.stdout, r.stderr
		t.Logf("%q to a full tmpfs: exit %d\nstdout:\n%s\nstderr:\n%s", args, status, out, errOut)
		if status != exitNotChecked {
			t.Errorf("exit %d, want %d (the copy stopped part way)", status, exitNotChecked)
		}
		if !strings.Contains(errOut, `the part of "b/big" copied is not kept`) || !strings.Contains(errOut, "no space left on device") {
			t.Errorf("stderr %q: want it to name b/big, stopped in, and ENOSPC", errOut)
		}
		var files, copied int
		notCopied := map[string]string{}
		if asJSON {
			var j fsckJSON
			if err := json.Unmarshal([]byte(out), &j); err != nil || j.Copied == nil {
				t.Fatalf("--json report %q: %v", out, err)
			}
			files, copied = j.Files, *j.Copied
			for _, n := range j.NotRecovered {
				if n.Offset == 0 && n.Length == int64(len(want[n.File])) {
					notCopied[n.File] = n.Why
				}
			}
		} else {
			m := regexp.MustCompile(`(?m)^(\d+) files?, `).FindStringSubmatch(out)
			c := regexp.MustCompile(`(?m)^copied (\d+) files? \(64 KiB\) to `).FindStringSubmatch(out)
			if m == nil || c == nil {
				t.Fatalf("no count of the files, or of the 64 KiB copied, in the report:\n%s", out)
			}
			files, _ = strconv.Atoi(m[1])
			copied, _ = strconv.Atoi(c[1])
			for _, m := range regexp.MustCompile(`(?m)^NOT COPIED: file "([^"]*)" \([^)]*\): (.*)$`).FindAllStringSubmatch(out, -1) {
				notCopied[m[1]] = m[2]
			}
			if n := len(notCopied); !strings.Contains(out, fmt.Sprintf("; 0 ranges not recovered, %s not copied\n", counted(n, "file"))) {
				t.Errorf("the summary does not count the %d files NOT COPIED:\n%s", n, out)
			}
		}
		if files != 3 || copied != 1 {
			t.Errorf("the report counts %d files, %d copied; want 3, 1 (a)", files, copied)
		}
		for _, name := range []string{"b/big", "c"} {
			if why, ok := notCopied[name]; !ok || why == "" {
				t.Errorf("the report does not name %q as not copied (with why): not copied %q", name, notCopied)
			}
		}
		if copied+len(notCopied) != files {
			t.Errorf("the report counts %d files, %d copied and %d not copied (%q)", files, copied, len(notCopied), notCopied)
		}
		copyToCheck(t, dir, map[string][]byte{"a": want["a"]})
		if empty := h46aEmptyDirs(t, dir); len(empty) > 0 {
			t.Errorf("DIR holds the empty directories %q", empty)
		}
		// The next run's DIR has room for a and part of b/big again.
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
}

// TestH46aInodesRunOutPartWayThroughSubdirectories: a file whose
// subdirectories the copy could make only in part (a tmpfs out of
// inodes: nr_inodes=4 holds its root, DIR, a and d, not d/e) is NOT
// COPIED, exit 4, and the copy goes on; d, made for it, is not left
// empty in DIR, holding the inode z needs.
func TestH46aInodesRunOutPartWayThroughSubdirectories(t *testing.T) {
	mnt := h46aTmpfs(t, "size=1m,nr_inodes=4")
	_, devName, e := copyToDevice(t)
	for _, name := range []string{"a", "d/e/x", "z"} {
		copyToWrite(t, e, name, []byte("data of "+name))
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(mnt, "copy")
	r := runBinary(t, "fsck", devName, "--copy-to", dir)
	status, out, errOut := r.status, r.stdout, r.stderr
	if status != exitCopyIncomplete || !strings.Contains(out, `NOT COPIED: file "d/e/x"`) || !strings.Contains(out, "no space left on device") {
		t.Errorf("fsck --copy-to a tmpfs out of inodes at d/e: exit %d, want %d and d/e/x NOT COPIED (ENOSPC)\nstdout:\n%s\nstderr:\n%s", status, exitCopyIncomplete, out, errOut)
	}
	copyToCheck(t, dir, map[string][]byte{"a": []byte("data of a"), "z": []byte("data of z")})
	if empty := h46aEmptyDirs(t, dir); len(empty) > 0 {
		t.Errorf("DIR holds the empty directories %q made for d/e/x, NOT COPIED\n%s", empty, out)
	}
}
