package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/zns"
)

// h45kBig is the size of the file the signal lands in: large enough
// that its copy takes many chunks, so that the test's SIGINT, sent once
// the copy has written its first bytes, lands while it is part copied.
// (Where it lands does not decide the test: see below.)
const h45kBig = 160 << 20

// h45kGeometry is a device's that holds h45kBig and a few small files.
const h45kGeometry = "zone_size=16M&zones=24"

// h45kData is n bytes of name's content: every 4 KiB block a different
// non-zero byte, so a block left zeros (a copy stopped before it) or
// copied to the wrong place shows.
func h45kData(name string, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte((i/4096+int(name[0]))%251 + 1)
	}
	return b
}

// TestH45kFsckCopyToStopsCleanlyOnSIGINT: one SIGINT (or SIGTERM, SIGHUP) during fsck
// --copy-to stopped it at once (exit 130, no report), and DIR could hold
// the file it was copying, created at its full size with only its first
// chunks copied and zeros past them: it looked whole to a user who then
// trusted it. Now the first signal during the copy stops it between
// chunks: the file it was copying removed, DIR synced, the report of
// what it copied printed with a line saying it was interrupted, and the
// exit status still the signal's (130, 143, 129).
//
// The real binary, a real emu device and a real DIR. The SIGINT is sent
// once DIR holds big's first bytes (polled, not slept for), fsck frozen
// (SIGSTOP) so that it is known to be alive to take it. If the copy got
// past big before the signal reached it (a fast machine), the same
// checks hold: DIR holds exactly the files the report counts, each
// whole, and the test logs that the signal missed big; if fsck exited
// before it could be frozen, the copy must be whole and its status 0.
func TestH45kFsckCopyToStopsCleanlyOnSIGINT(t *testing.T) {
	_, devName, e := copyToDeviceWith(t, h45kGeometry)
	want := map[string][]byte{
		"a":   h45kData("a", 3*4096+100),
		"big": h45kData("big", h45kBig),
		"c":   h45kData("c", 5000),
	}
	for _, name := range []string{"a", "big", "c"} {
		copyToWrite(t, e, name, want[name])
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(signalName(sig), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "copy")
			frozen, status, out, errOut := signalDuringCopy(t, devName, dir, "big", want["big"][:4096], sig)
			if !frozen {
				// fsck was done before it could be frozen: no
				// signal was sent; the copy ran to its end.
				t.Logf("fsck --copy-to exited before the signal (the copy ran to its end)")
				if status != 0 || !strings.Contains(out, "copied 3 files") {
					t.Errorf("fsck --copy-to not signalled: exit %d, stdout %q, stderr %q; want 0 and 3 files copied", status, out, errOut)
				}
				copyToCheck(t, dir, want)
				return
			}
			if status != exitSignal(sig) || !strings.Contains(errOut, "interrupted by "+signalName(sig)) {
				t.Errorf("one %s during the copy: exit %d, stderr %q; want %d and 'interrupted by %[1]s'", signalName(sig), status, errOut, exitSignal(sig))
			}
			// The report: what was copied, and (the signal having landed in
			// big) that it was interrupted there.
			copied := -1
			if m := regexp.MustCompile(`(?m)^copied (\d+) files? \(.*\) to `).FindStringSubmatch(out); m != nil {
				copied, _ = strconv.Atoi(m[1])
			} else {
				t.Errorf("no report of what was copied after one signal; stdout %q, stderr %q", out, errOut)
			}
			stoppedInBig := strings.Contains(out, `interrupted: the copy stopped in "big"`)
			t.Logf("after one signal: stdout %q, stderr %q", out, errOut)
			if !stoppedInBig && copied >= 0 {
				t.Logf("the signal reached fsck after big was copied (%d files copied); stdout %q", copied, out)
			}
			if stoppedInBig && copied != 1 {
				t.Errorf("interrupted in big, the report counts %d files copied; want 1 (a)\n%s", copied, out)
			}
			// DIR holds only whole files, in name order (the copy's order),
			// as many as the report counts: never big part copied.
			names, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for i, d := range names {
				name := d.Name()
				got, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil {
					t.Fatal(err)
				}
				w, ok := want[name]
				if !ok || name != []string{"a", "big", "c"}[i] {
					t.Errorf("DIR holds %q, not one of the files copied in order", name)
					continue
				}
				if !bytes.Equal(got, w) {
					z := bytes.IndexByte(got, 0) // never in the content
					t.Errorf("DIR holds %q at %d bytes (want %d) but not whole: zeros from byte %d: a copy stopped part way, left looking whole", name, len(got), len(w), z)
				}
			}
			if copied >= 0 && len(names) != copied {
				t.Errorf("DIR holds %d files, the report says %d were copied", len(names), copied)
			}
		})
	}
}

// signalDuringCopy runs the real binary's fsck devName --copy-to dir,
// waits until file's copy has begun (its file in dir holds first, its
// first bytes: created sized, it reads zeros until then), then freezes
// fsck and sends it sig. It returns whether fsck was frozen (and so sent
// sig: false if it finished the copy and exited first), and its exit
// status and output.
//
// Freezing fsck before the signal: on a loaded machine this goroutine
// can be held up long enough for fsck to finish the whole copy and
// exit, and a signal sent then went nowhere (the test failed on
// "process already finished", or on exit 0). Frozen (SIGSTOP, state T),
// fsck is known to be alive when the signal is sent; it takes it once it
// runs again (SIGCONT). If it exited first, that is the only other
// outcome, for the caller to check.
func signalDuringCopy(t *testing.T, devName, dir, file string, first []byte, sig syscall.Signal) (frozen bool, status int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(zonefoldBinary(t), "fsck", devName, "--copy-to", dir)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	defer func() {
		cmd.Process.Kill()
		<-done
	}()
	buf := make([]byte, len(first))
	deadline := time.Now().Add(time.Minute)
	for began := false; !began; time.Sleep(time.Millisecond) {
		select {
		case <-done:
			t.Fatalf("fsck --copy-to exited %d before %s's copy was seen to begin\nstdout: %s\nstderr: %s", cmd.ProcessState.ExitCode(), file, out.String(), errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's copy did not begin within a minute", file)
		}
		if f, err := os.Open(filepath.Join(dir, file)); err == nil {
			n, _ := f.ReadAt(buf, 0)
			f.Close()
			began = n == len(buf) && bytes.Equal(buf, first)
		}
	}
	frozen = cmd.Process.Signal(syscall.SIGSTOP) == nil && h45kStopped(t, cmd.Process.Pid)
	if frozen {
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("fsck --copy-to still ran a minute after one %s", signalName(sig))
	}
	return frozen, cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}

// h45kStopped waits until process pid, sent SIGSTOP, is stopped (true)
// or has exited (false: a zombie, or already reaped).
func h45kStopped(t *testing.T, pid int) bool {
	t.Helper()
	for giveUp := time.Now().Add(time.Minute); time.Now().Before(giveUp); time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		// The state follows the command name, which is in parentheses.
		i := bytes.LastIndexByte(b, ')')
		switch {
		case i >= 0 && bytes.HasPrefix(b[i+1:], []byte(" T")):
			return true
		case i >= 0 && bytes.HasPrefix(b[i+1:], []byte(" Z")):
			return false
		}
	}
	t.Fatalf("process %d neither stopped nor exited within a minute of SIGSTOP", pid)
	return false
}

// TestH45kStopModeDecidesOnce: the command's word that it stops cleanly
// from here on (stopCleanlyFromHere) and Main's choice to exit at once
// swap one mode: whichever comes first holds, so the command never
// begins a copy that Main has already chosen to cut short, and Main never
// exits at once under a copy that said it stops cleanly.
func TestH45kStopModeDecidesOnce(t *testing.T) {
	if !stopCleanlyFromHere(context.Background()) {
		t.Error("outside Main (no signal loop): stopCleanlyFromHere false; want true")
	}
	var m stopMode
	ctx := context.WithValue(context.Background(), stopModeKey{}, &m)
	if !stopCleanlyFromHere(ctx) || !stopCleanlyFromHere(ctx) || m.Load() != stopCleanly {
		t.Fatalf("before any signal: stopCleanlyFromHere false, or mode %d; want true twice, mode %d", m.Load(), stopCleanly)
	}
	if m.CompareAndSwap(stopAtOnce, stoppingAtOnce) {
		t.Error("Main's loop could choose to exit at once after the command said it stops cleanly")
	}
	var late stopMode
	ctx = context.WithValue(context.Background(), stopModeKey{}, &late)
	if !late.CompareAndSwap(stopAtOnce, stoppingAtOnce) {
		t.Fatal("Main's loop could not choose to exit at once before the command said anything")
	}
	if stopCleanlyFromHere(ctx) {
		t.Error("after Main chose to exit at once, stopCleanlyFromHere true: the command would begin a copy cut short")
	}
}

// TestH45kCopyBegunAfterTheSignalStops: a file the copy begins after
// its context ended stops the copy even if it needs no write (empty):
// without that, a run of empty files went on being made after Ctrl-C.
// DIR keeps the files copied before the signal, and not the one the copy
// stopped in. (Real files in a real DIR; the signal is the context's
// cancel, as Main's loop does it.)
func TestH45kCopyBegunAfterTheSignalStops(t *testing.T) {
	_, devName, e := copyToDevice(t)
	copyToWrite(t, e, "a", []byte("data of a"))
	copyToWrite(t, e, "b", nil)
	copyToWrite(t, e, "c", []byte("data of c"))
	dev, root, dirs, dir := copyToOpen(t, e, devName)
	out, err := copyStoppedIn(devName, dev, root, dirs, dir, "b", false) // the signal, between a and b
	if !errors.Is(err, context.Canceled) || !strings.Contains(out, "copied 1 file") || !strings.Contains(out, `interrupted: the copy stopped in "b"`) {
		t.Errorf("copy interrupted before the empty b: err %v, report\n%s\nwant context.Canceled, 'copied 1 file' and 'interrupted: the copy stopped in \"b\"'", err, out)
	}
	copyToCheck(t, dir, map[string][]byte{"a": []byte("data of a")})
}

// copyStoppedIn copies dev into root (dir) as fsck --copy-to does, a
// signal (the context's cancel, as Main's loop does it) arriving as the
// copy begins the file stopIn (none if ""), and returns the report
// (asJSON: --json's) and salvageInto's error.
func copyStoppedIn(devName string, dev zns.Device, root *os.Root, dirs copyDirs, dir, stopIn string, asJSON bool) (string, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	create := stopsBetweenChunks(ctx, createIn(root, dirs))
	stopAt := func(name string, size int64) (io.WriterAt, error) {
		if name == stopIn {
			cancel()
		}
		return create(name, size)
	}
	var out bytes.Buffer
	err := salvageInto(&out, devName, dev, stopAt, finishCopy(root, dirs), dir, asJSON)
	return out.String(), err
}

// copyToOpen closes e (if not nil: the caller closed it), opens its
// device devName for a salvage, and makes the copy's directory (dir, its
// root and the copyDirs to sync): what a test of salvageInto starts
// from. Both are closed at the end of the test.
func copyToOpen(t *testing.T, e *engine.Engine, devName string) (zns.Device, *os.Root, copyDirs, string) {
	t.Helper()
	if e != nil {
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
	dev, err := zns.Open(devName, zns.Options{Existing: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	dir := filepath.Join(t.TempDir(), "copy")
	root, _, err := copyDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return dev, root, copyDirs{}, dir
}
