package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/zonefold/zonefold/engine"
)

// TestH46gFlatClashNotesNoFileAsDirectory: copyDirs is the directories
// the copy syncs once its files are. h46a's mkdirs takes a part of a
// name that exists for a directory (EEXIST) even where it is a file the
// copy made (zonefold names are flat: "a" and "a/b" both files), and
// the name was noted before its create failed (ENOTDIR, NOT COPIED):
// "a", a file synced as it was closed, was noted a directory and
// synced again with the directories. Only the directories a created
// file lives in are noted.
func TestH46gFlatClashNotesNoFileAsDirectory(t *testing.T) {
	_, devName, e := copyToDevice(t)
	for _, name := range []string{"a", "a/b", "c/d/e", "c/d/e/f"} {
		copyToWrite(t, e, name, []byte("data of "+name))
	}
	dev, root, dirs, dir := copyToOpen(t, e, devName)
	var out bytes.Buffer
	if err := salvageInto(&out, devName, dev, createIn(root, dirs), finishCopy(root, dirs), dir, false); err == nil {
		t.Fatalf("a copy of the flat names a, a/b, c/d/e, c/d/e/f: no error, want a/b and c/d/e/f NOT COPIED\n%s", out.String())
	}
	copyToCheck(t, dir, map[string][]byte{"a": []byte("data of a"), "c/d/e": []byte("data of c/d/e")})
	for _, d := range dirs.order() {
		if fi, err := root.Lstat(d); err != nil {
			t.Errorf("the copy notes %q as a directory to sync: %v", d, err)
		} else if !fi.IsDir() {
			t.Errorf("the copy notes %q as a directory to sync: it is a %v", d, fi.Mode())
		}
	}
}

// h46gStopInN copies a device holding h (one block, damaged: its whole
// length a hole), n and z into a new DIR, a signal (the context's
// cancel, as Main's loop does it) stopping the copy in n: h copied as a
// hole of zeros, n and z NOT COPIED. It returns the report and error.
func h46gStopInN(t *testing.T, asJSON bool) (string, error) {
	t.Helper()
	path, devName, e := copyToDevice(t)
	copyToWrite(t, e, "h", bytes.Repeat([]byte("h"), engine.BlockSize))
	copyToWrite(t, e, "n", []byte("data of n"))
	copyToWrite(t, e, "z", []byte("data of z"))
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	// h's record is the first in the first data zone (h46a's
	// TestH46aStoppedFileHasNoHoleReported): damage its one block.
	g := zoneGeometry(t, devName)
	copyToPatch(t, devName, path, 2*g.ZoneSize+engine.BlockSize+7, []byte("garbage"))
	dev, root, dirs, dir := copyToOpen(t, nil, devName)
	out, err := copyStoppedIn(devName, dev, root, dirs, dir, "n", asJSON)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a copy a signal stopped in n: error %v, want context.Canceled\n%s", err, out)
	}
	copyToCheck(t, dir, map[string][]byte{"h": make([]byte, engine.BlockSize)})
	return out, err
}

// TestH46gJSONTellsNotCopiedFromAHole: --json lists a file NOT COPIED
// (the one a copy stopped in, each after it) in not_recovered as
// offset 0, its whole length, exactly as a range NOT RECOVERED that is
// a whole file (copied, DIR holding it as zeros): a script could not
// tell a file DIR holds from one it does not, nor count the files not
// copied that the text report counts. Each file not copied now says so
// (not_copied: true); a hole does not.
func TestH46gJSONTellsNotCopiedFromAHole(t *testing.T) {
	out, _ := h46gStopInN(t, true)
	var j struct {
		Files        int              `json:"files"`
		Copied       int              `json:"copied"`
		NotRecovered []map[string]any `json:"not_recovered"`
	}
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		t.Fatalf("--json report %q: %v", out, err)
	}
	notCopied := map[string]bool{}
	holes := 0
	for _, n := range j.NotRecovered {
		file, _ := n["file"].(string)
		switch nc, ok := n["not_copied"]; {
		case ok && nc == true:
			notCopied[file] = true
		case ok:
			t.Errorf("not_recovered entry %v: not_copied is %v, want true or absent", n, nc)
		default:
			holes++
			if file != "h" {
				t.Errorf("not_recovered entry %v is a hole, but only h has one", n)
			}
		}
	}
	if !notCopied["n"] || !notCopied["z"] || len(notCopied) != 2 || holes != 1 {
		t.Errorf("--json lists as not copied %v and %d holes; want n and z, and h's one hole\n%s", notCopied, holes, out)
	}
	if j.Files != 3 || j.Copied != 1 || j.Copied+len(notCopied) != j.Files {
		t.Errorf("--json counts %d files, %d copied, %d not copied; want 3, 1 (h), 2\n%s", j.Files, j.Copied, len(notCopied), out)
	}
}

// TestH46gSignalNamedInNotCopied: the file a signal stopped the copy in
// is NOT COPIED "because": the report said "context canceled", Go's
// word for it, which names no signal. It now says a signal interrupted
// the copy there.
func TestH46gSignalNamedInNotCopied(t *testing.T) {
	out, _ := h46gStopInN(t, false)
	line := regexp.MustCompile(`(?m)^NOT COPIED: file "n" .*$`).FindString(out)
	if !strings.Contains(line, "interrupted by a signal") {
		t.Errorf("the line of n, the file a signal stopped the copy in, is %q: want it to say 'interrupted by a signal'\n%s", line, out)
	}
	for _, want := range []string{`NOT COPIED: file "z" (9 B): the copy stopped before it (in "n")`,
		"copied 1 file (0 B) to ", "; 1 range not recovered, 2 files not copied\n", `interrupted: the copy stopped in "n"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
}
