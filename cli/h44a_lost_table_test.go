package cli

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// An emu device whose two header slots read as zeros (a bad write, a
// user's mistake) but whose zones still hold a file system: every
// command that only opens a device (serve, zones report, the zone
// actions, fsck) and format without --force refuse it, exit 1 (fsck 8,
// its own status for a device it could not check: fsckStatus), say
// which file and what to do, and leave it as it was. They wrote a
// fresh, empty zone table over it, every zone's write pointer and so
// all its data lost without a word (fsck stopped doing so in 038c6d5).
// format --force starts it over. A blank file, new or pre-sized, keeps
// becoming a device as it always did.

// lostTableDevice is an emu device of 16 zones of 1 MiB holding a file,
// with both header slots then zeroed, and its file's path.
func lostTableDevice(t *testing.T) (path, devName string) {
	t.Helper()
	path, devName, e := copyToDevice(t)
	copyToWrite(t, e, "f", bytes.Repeat([]byte("lost table"), 3000))
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	loseZoneTable(t, path)
	return path, devName
}

// runServeOrRefusal runs the binary with args, a serve, until it exits or
// prints "serving " (then it is killed): its result, and whether it
// served.
func runServeOrRefusal(t *testing.T, args ...string) (result, bool) {
	t.Helper()
	cmd := exec.Command(zonefoldBinary(t), args...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() })
	defer timer.Stop()
	var stdout strings.Builder
	served := false
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		stdout.WriteString(sc.Text() + "\n")
		if strings.HasPrefix(sc.Text(), "serving ") && !served {
			served = true
			cmd.Process.Kill()
		}
	}
	cmd.Wait()
	return result{stdout.String(), errb.String(), cmd.ProcessState.ExitCode()}, served
}

func TestLostZoneTableIsRefused(t *testing.T) {
	for _, args := range [][]string{
		{"zones", "report", "DEV"},
		{"zones", "report", "DEV", "--json"},
		{"format", "DEV"},
		{"zones", "reset", "DEV", "--all", "--force"},
		{"zones", "finish", "DEV", "--zone", "5"},
		{"fsck", "DEV"},
		{"serve", "DEV", "--socket", "SOCK"},
		{"serve", "DEV", "--format", "--socket", "SOCK"},
	} {
		t.Run(strings.Join(args, "_"), func(t *testing.T) {
			path, devName := lostTableDevice(t)
			refusedUnchanged(t, path, devName, args, path, "its zone table is lost", "holds data", "`zonefold format --force DEVICE` erases it")
		})
	}
}

// format --force erases a device whose zone table is lost and makes a
// clean file system of it.
func TestLostZoneTableFormatForce(t *testing.T) {
	_, devName := lostTableDevice(t)
	if code, out := copyToRun("format", devName, "--force"); code != exitOK {
		t.Fatalf("format --force: exit %d\n%s", code, out)
	}
	if code, out := copyToRun("fsck", devName); code != exitOK || !strings.Contains(out, "clean") || !strings.Contains(out, "0 files") {
		t.Fatalf("fsck after format --force: exit %d\n%s", code, out)
	}
}

// Blank files still become devices: format, zones report and serve
// --format of a new path, an empty file, a pre-sized sparse file and a
// pre-sized file of zeros.
func TestBlankEmuFileStillBecomesADevice(t *testing.T) {
	blank := map[string]func(path string) error{
		"missing": func(string) error { return nil },
		"empty":   func(path string) error { return os.WriteFile(path, nil, 0o644) },
		"sparse": func(path string) error {
			if err := os.WriteFile(path, nil, 0o644); err != nil {
				return err
			}
			return os.Truncate(path, 17<<20)
		},
		"zeros": func(path string) error { return os.WriteFile(path, make([]byte, 17<<20), 0o644) },
	}
	for _, cmd := range []string{"format", "zones report", "serve --format"} {
		for _, name := range []string{"missing", "empty", "sparse", "zeros"} {
			t.Run(strings.ReplaceAll(cmd, " ", "_")+"/"+name, func(t *testing.T) {
				dir := t.TempDir()
				path := filepath.Join(dir, "dev")
				if err := blank[name](path); err != nil {
					t.Fatal(err)
				}
				devName := fmt.Sprintf("emu:%s?zone_size=1M&zones=16", path)
				args := append(strings.Fields(cmd), devName)
				if strings.HasPrefix(cmd, "serve") {
					args = append(args, "--socket", filepath.Join(dir, "zf.sock"))
					if r, served := runServeOrRefusal(t, args...); !served {
						t.Fatalf("%q did not serve: exit %d\n%s", args, r.status, r.stderr)
					}
				} else if code, out := copyToRun(args...); code != exitOK {
					t.Fatalf("%q: exit %d\n%s", args, code, out)
				}
				if code, out := copyToRun("zones", "report", devName); code != exitOK || !strings.Contains(out, "16 zones of 1 MiB") {
					t.Fatalf("zones report after %q: exit %d\n%s", args, code, out)
				}
			})
		}
	}
}
