package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/server"
)

// The command line as users meet it, over the built binary: exit
// statuses, one-line errors without stutter, --json, signals, and nothing
// left behind by a failed command.

var built struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

// zonefoldBinary builds the binary once per test process.
func zonefoldBinary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "zonefold-cli-test")
		if err != nil {
			built.err = err
			return
		}
		built.path = filepath.Join(dir, "zonefold")
		built.out, built.err = exec.Command("go", "build", "-ldflags=-checklinkname=0", "-o", built.path, "..").CombinedOutput()
	})
	if built.err != nil {
		t.Fatalf("build zonefold: %v\n%s", built.err, built.out)
	}
	return built.path
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.path != "" {
		os.RemoveAll(filepath.Dir(built.path))
	}
	os.Exit(code)
}

type result struct {
	stdout, stderr string
	status         int
}

// runBinary runs the binary to completion (within a minute).
func runBinary(t *testing.T, args ...string) result {
	t.Helper()
	cmd := exec.Command(zonefoldBinary(t), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Env = append(os.Environ(), "ZONEFOLD_SOCK="+filepath.Join(t.TempDir(), "default.sock"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() })
	defer timer.Stop()
	err := cmd.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return result{out.String(), errb.String(), cmd.ProcessState.ExitCode()}
}

// checkErrorLine fails unless stderr is one "zonefold: " line in which no
// part of the message is repeated.
func checkErrorLine(t *testing.T, args []string, stderr string) {
	t.Helper()
	if !strings.HasPrefix(stderr, "zonefold: ") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("%v: stderr is not one 'zonefold: ' line: %q", args, stderr)
		return
	}
	parts := strings.Split(strings.TrimSuffix(stderr, "\n"), ": ")
	seen := map[string]bool{}
	for _, p := range parts {
		if seen[p] && !strings.Contains(p, " ") || len(p) > 20 && seen[p] {
			t.Errorf("%v: stderr repeats %q: %q", args, p, stderr)
		}
		seen[p] = true
	}
}

var snakeKey = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// checkJSON fails unless out is one JSON object whose keys, at every
// depth, are snake_case, with no HTML escapes; it returns the object.
func checkJSON(t *testing.T, what, out string) map[string]any {
	t.Helper()
	if strings.Contains(out, `\u0026`) || strings.Contains(out, `\u003c`) {
		t.Errorf("%s: HTML escapes in %s", what, out)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%s: not one JSON object: %v\n%s", what, err, out)
	}
	var walk func(path string, x any)
	walk = func(path string, x any) {
		switch x := x.(type) {
		case map[string]any:
			for k, e := range x {
				if !snakeKey.MatchString(k) {
					t.Errorf("%s: key %s.%s is not snake_case", what, path, k)
				}
				walk(path+"."+k, e)
			}
		case []any:
			for _, e := range x {
				walk(path+"[]", e)
			}
		case nil:
			t.Errorf("%s: %s is null", what, path)
		}
	}
	walk("", v)
	return v
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func TestCLIStatusesAndErrors(t *testing.T) {
	dir := t.TempDir()
	emu := func(name, params string) string { return "emu:" + filepath.Join(dir, name) + "?" + params }
	for _, tc := range []struct {
		args   []string
		status int
		stderr string   // in the one error line (status != 0)
		stdout string   // in stdout (status 0)
		gone   []string // files under dir that must not exist afterwards
	}{
		{args: []string{"bogus"}, status: 2, stderr: `unknown command "bogus" for "zonefold" (see 'zonefold --help')`},
		{args: []string{"zones", "repot", "x"}, status: 2, stderr: `unknown command "repot" for "zonefold zones" (did you mean "report"?)`},
		// A wrong count of arguments says which ones the command takes
		// (it said "accepts 2 arg(s), received 1").
		{args: []string{"zones", "report"}, status: 2, stderr: "zones report takes DEVICE, got 0 arguments (see 'zonefold zones report --help')"},
		{args: []string{"put", "/etc/hostname"}, status: 2, stderr: "put takes LOCAL NAME, got 1 argument (see 'zonefold put --help')"},
		{args: []string{"rm"}, status: 2, stderr: "rm takes NAME..., got 0 arguments"},
		{args: []string{"bench", "gc", "a", "b"}, status: 2, stderr: "bench gc takes [DEVICE], got 2 arguments"},
		{args: []string{"zones", "reset", "x"}, status: 2, stderr: "give exactly one of --zone N and --all"},
		{args: []string{"zones", "reset", "x", "--zone", "-1"}, status: 2, stderr: `bad count "-1"`},
		{args: []string{"serve", "x", "--force"}, status: 2, stderr: "--force only goes with --format"},
		{args: []string{"format", "x", "--bogus"}, status: 2, stderr: "unknown flag: --bogus"},
		{args: []string{"bench", "run", "x", "--files", "-4"}, status: 2, stderr: `invalid argument "-4" for "--files" flag: bad count "-4"`},
		{args: []string{"bench", "run", "x", "--scale", "nan"}, status: 2, stderr: `bad number "nan"`},
		{args: []string{"bench", "run", "x", "--scale", "inf"}, status: 2, stderr: `bad number "inf"`},
		{args: []string{"bench", "run", "x", "--cache", "99999999999999T"}, status: 2, stderr: "--cache: size \"99999999999999T\" is too large"},
		{args: []string{"bench", "run", "x", "--bs", "1.3K"}, status: 2, stderr: "not a whole number of bytes"},
		{args: []string{"bench", "run", "x", "--iodepth", "99999999999"}, status: 2, stderr: "is too large"},
		{args: []string{"bench", "batching", "--file-size", "64X"}, status: 2, stderr: `invalid argument "64X" for "--file-size" flag: bad size "64X"`},
		{args: []string{"bench", "folios", "--cache-size", "1e3"}, status: 2, stderr: `bad size "1e3"`},
		{args: []string{"bench", "folios", "--bs", "3G"}, status: 2, stderr: `size "3G" is too large (at most 2 GiB - 1)`},
		{args: []string{"bench", "gc", "--util", "nan"}, status: 2, stderr: `bad number "nan"`},
		{args: []string{"bench", "gc", "--files", "-1"}, status: 2, stderr: `bad count "-1"`},
		{args: []string{"bench", "gc", "--bs", "-8K"}, status: 2, stderr: `bad size "-8K"`},
		// A value the benchmark itself refuses is as much a bad flag as
		// one the flag parser refuses: exit 2 (these exited 1).
		{args: []string{"bench", "gc", "--configs", "mru/bogus"}, status: 2, stderr: `unknown GC policy "bogus"`},
		{args: []string{"bench", "gc", "--workload", "bogus"}, status: 2, stderr: `workload "bogus": want uniform`},
		{args: []string{"bench", "gc", "--util", "2"}, status: 2, stderr: "--util 2: want more than 0 and at most 0.95"},
		{args: []string{"bench", "lsm", "--rounds", "0"}, status: 2, stderr: "--rounds 0: want 1..100"},
		{args: []string{"bench", "peers", "/dev/nullb9", "--util", "2"}, status: 2, stderr: "--util 2: want more than 0"},
		{args: []string{"bench", "batching", "--qd", "0"}, status: 2, stderr: "--qd 0: want 1..4096"},
		{args: []string{"bench", "seeds", "--check", "extra"}, status: 2, stderr: `bench seeds takes no arguments, got 1 ("extra")`},
		{args: []string{"bench", "kernel", "x", "--mode", "bogus"}, status: 2, stderr: `--mode "bogus": want auto, null or emu`},
		{args: []string{"bench", "kernel", "x", "--rounds", "0"}, status: 2, stderr: "--rounds: must be more than 0"},
		{args: []string{"bench", "kernel", "x", "--cache", "1K"}, status: 2, stderr: "--cache: at least 1 MiB"},
		{args: []string{"--version"}, status: 0, stdout: "zonefold "},
		{args: []string{"zones"}, status: 0, stdout: "Report and manage zones"},
		{args: []string{"ls", "--socket", filepath.Join(dir, "none.sock")}, status: 1,
			stderr: "no zonefold daemon is serving " + filepath.Join(dir, "none.sock") + " (no such file or directory); start one with 'zonefold serve DEVICE --socket"},
		// A device string wrong as typed is a usage error (h44d); a
		// device zonefold cannot use, a failure.
		{args: []string{"format", emu("a", "zone_size=1M&zones=-4")}, status: 2, stderr: `zones: bad count "-4"`, gone: []string{"a"}},
		{args: []string{"format", emu("b", "zone_size=1M&zones=3")}, status: 1, stderr: "the device has 3 zones; zonefold needs at least 6", gone: []string{"b"}},
		{args: []string{"format", emu("c", "zone_size=1T&zones=1000000000")}, status: 2, stderr: "an emulated device has at most 1048576", gone: []string{"c"}},
		{args: []string{"format", emu("d", "zone_size=4194304T&zones=4")}, status: 2, stderr: "overflow a 64-bit byte offset", gone: []string{"d"}},
		// fsck has statuses of its own (fsckStatus): 8, not checked.
		{args: []string{"fsck", emu("e", "zone_size=1M&zones=8")}, status: 8, stderr: "device is not formatted by zonefold (run `zonefold format DEVICE`)", gone: []string{"e"}},
		{args: []string{"serve", emu("f", "zone_size=1M&zones=8"), "--socket", filepath.Join(dir, "f.sock")}, status: 1,
			stderr: "not formatted by zonefold: serve it with --format (or run `zonefold format DEVICE` first)", gone: []string{"f", "f.sock", "f.sock.lock"}},
		{args: []string{"zones", "reset", "null:?zone_size=1M&zones=4&conv=1", "--zone", "0"}, status: 1,
			stderr: "zonefold: zns: reset zone 0: operation not valid on a conventional zone\n"},
	} {
		r := runBinary(t, tc.args...)
		if r.status != tc.status {
			t.Errorf("%v: exit %d, want %d\nstdout %q\nstderr %q", tc.args, r.status, tc.status, r.stdout, r.stderr)
			continue
		}
		if tc.status == 0 {
			if !strings.Contains(r.stdout, tc.stdout) || r.stderr != "" {
				t.Errorf("%v: stdout %q (want %q), stderr %q", tc.args, r.stdout, tc.stdout, r.stderr)
			}
		} else {
			checkErrorLine(t, tc.args, r.stderr)
			if !strings.Contains(r.stderr, tc.stderr) {
				t.Errorf("%v: stderr %q, want %q in it", tc.args, r.stderr, tc.stderr)
			}
			if r.stdout != "" {
				t.Errorf("%v failed but printed %q", tc.args, r.stdout)
			}
		}
		for _, g := range tc.gone {
			if exists(filepath.Join(dir, g)) {
				t.Errorf("%v left %s behind", tc.args, g)
			}
		}
	}
}

func TestCLIJSON(t *testing.T) {
	dir := t.TempDir()
	dev := "emu:" + filepath.Join(dir, "dev") + "?zone_size=1M&zones=16&conv=1"
	r := runBinary(t, "format", dev, "--json")
	if r.status != 0 {
		t.Fatalf("format --json: %+v", r)
	}
	v := checkJSON(t, "format --json", r.stdout)
	if v["device"] != dev || v["zone_size"] != float64(1<<20) || v["used_zones"] != float64(16) {
		t.Errorf("format --json: %v", v)
	}
	r = runBinary(t, "bench", "batching", "--file-size", "1M", "--time", "20ms", "--rounds", "2", "--qd", "4", "--dir", dir, "--json")
	if r.status != 0 {
		t.Fatalf("bench batching --file-size 1M: %+v", r)
	}
	checkJSON(t, "bench batching --json", r.stdout)
	r = runBinary(t, "zones", "report", dev, "--json")
	v = checkJSON(t, "zones report --json", r.stdout)
	if g, _ := v["geometry"].(map[string]any); g["zone_size"] != float64(1<<20) || g["zones"] != float64(16) {
		t.Errorf("zones report --json geometry: %v", v["geometry"])
	}
	r = runBinary(t, "fsck", dev, "--json")
	v = checkJSON(t, "fsck --json", r.stdout)
	if u, _ := v["uuid"].(string); len(u) != 32 || v["clean"] != true || fmt.Sprint(v["notes"]) != "[]" {
		t.Errorf("fsck --json: %v", v)
	}
	if r = runBinary(t, "fsck", dev); r.status != 0 || !strings.Contains(r.stdout, "0 B live") || !strings.Contains(r.stdout, "clean") {
		t.Errorf("fsck: %+v", r)
	}
}

// daemonProc is `zonefold serve` as a child process.
type daemonProc struct {
	cmd    *exec.Cmd
	socket string
	stderr bytes.Buffer
	done   chan struct{}
}

// startDaemon runs `zonefold serve DEVICE --format` and waits until it
// serves.
func startDaemon(t *testing.T, device string) *daemonProc {
	t.Helper()
	d := &daemonProc{socket: filepath.Join(t.TempDir(), "zf.sock")}
	d.cmd = exec.Command(zonefoldBinary(t), "serve", device, "--format", "--socket", d.socket, "--cache", "16M")
	d.cmd.Stderr = &d.stderr
	d.done = runServe(t, d.cmd, &d.stderr)
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		<-d.done
	})
	return d
}

// runServe starts cmd, a `zonefold serve` whose Stderr is stderr, and
// waits until it prints "serving "; the returned channel closes when the
// process has exited. A daemon that exits or stays silent for a minute
// fails the test with its stderr.
func runServe(t *testing.T, cmd *exec.Cmd, stderr fmt.Stringer) chan struct{} {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan bool, 1)
	exited := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		ok := false
		for sc.Scan() {
			if !ok && strings.HasPrefix(sc.Text(), "serving ") {
				ok = true
				ready <- true
			}
		}
		if !ok {
			ready <- false
		}
		cmd.Wait()
		close(exited)
	}()
	select {
	case ok := <-ready:
		if !ok {
			<-exited
			t.Fatalf("daemon did not start: %v\n%s", cmd.ProcessState, stderr)
		}
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		<-exited
		t.Fatalf("daemon did not start within a minute\n%s", stderr)
	}
	return exited
}

// stop signals the daemon and returns its exit status.
func (d *daemonProc) stop(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	d.cmd.Process.Signal(sig)
	select {
	case <-d.done:
	case <-time.After(time.Minute):
		t.Fatal("daemon did not stop within a minute")
	}
	return d.cmd.ProcessState.ExitCode()
}

func TestCLIClientCommands(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, "emu:"+filepath.Join(dir, "dev")+"?zone_size=4M&zones=16")
	local := filepath.Join(dir, "local")
	if err := os.WriteFile(local, bytes.Repeat([]byte("x"), 1536), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := []string{"--socket", d.socket}
	r := runBinary(t, append([]string{"put", local, "a&b", "--json"}, sock...)...)
	if v := checkJSON(t, "put --json", r.stdout); r.status != 0 || v["name"] != "a&b" || v["size"] != float64(1536) {
		t.Fatalf("put --json: %+v", r)
	}
	if r = runBinary(t, append([]string{"put", local, "c"}, sock...)...); r.status != 0 || r.stdout != "c: 1.5 KiB, durable\n" {
		t.Fatalf("put: %+v", r)
	}
	if r = runBinary(t, append([]string{"ls"}, sock...)...); r.stdout != "a&b\nc\n" {
		t.Fatalf("ls: %+v", r)
	}
	if r = runBinary(t, append([]string{"ls", "-l"}, sock...)...); r.stdout != "1.5 KiB  a&b\n1.5 KiB  c\n" {
		t.Fatalf("ls -l: %+v", r)
	}
	r = runBinary(t, append([]string{"ls", "--json"}, sock...)...)
	if v := checkJSON(t, "ls --json", r.stdout); len(v["files"].([]any)) != 2 {
		t.Fatalf("ls --json: %+v", r)
	}
	r = runBinary(t, append([]string{"stat", "--json"}, sock...)...)
	if v := checkJSON(t, "stat --json", r.stdout); v["host_written"] != float64(2*1536) || v["gc_victims_changed"] != float64(0) {
		t.Fatalf("stat --json: %+v", r)
	}
	// A failed get leaves nothing; a failed put leaves the target.
	copyPath := filepath.Join(dir, "copy")
	if r = runBinary(t, append([]string{"get", "missing", copyPath}, sock...)...); r.status != 1 || exists(copyPath) {
		t.Fatalf("get of a missing file: %+v, copy exists %v", r, exists(copyPath))
	} else {
		checkErrorLine(t, []string{"get"}, r.stderr)
	}
	if r = runBinary(t, append([]string{"put", dir, "c"}, sock...)...); r.status != 1 || !strings.Contains(r.stderr, "is a directory") {
		t.Fatalf("put of a directory: %+v", r)
	}
	if r = runBinary(t, append([]string{"get", "c", copyPath}, sock...)...); r.status != 0 {
		t.Fatalf("get: %+v", r)
	}
	if b, _ := os.ReadFile(copyPath); len(b) != 1536 {
		t.Fatalf("get after a failed put: %d bytes", len(b))
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 3 { // dev, local, copy
		t.Fatalf("left behind in %s: %v", dir, ents)
	}
	// serve ends with status 0 when a signal stops it cleanly, and
	// leaves neither its socket nor its lock file.
	if st := d.stop(t, syscall.SIGTERM); st != 0 {
		t.Fatalf("serve after SIGTERM: exit %d\n%s", st, d.stderr.String())
	}
	if exists(d.socket) || exists(d.socket+".lock") {
		t.Fatal("serve left its socket or its lock file behind")
	}
}

// A signal stops any command: 130 after SIGINT, 143 after SIGTERM, even
// one that never looks at its context (crash-writer writes until killed).
func TestCLISignals(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(signalName(sig), func(t *testing.T) {
			dev := "emu:" + filepath.Join(t.TempDir(), "dev") + "?zone_size=1M&zones=24"
			cmd := exec.Command(zonefoldBinary(t), "debug", "crash-writer", dev)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			sc := bufio.NewScanner(out)
			for sc.Scan() && sc.Text() != "ready" {
			}
			cmd.Process.Signal(sig)
			go func() {
				for sc.Scan() {
				}
			}()
			done := make(chan struct{})
			go func() { cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("crash-writer survives %s", signalName(sig))
			}
			if st := cmd.ProcessState.ExitCode(); st != exitSignal(sig) {
				t.Fatalf("after %s: exit %d, want %d\n%s", signalName(sig), st, exitSignal(sig), stderr.String())
			}
			if want := "zonefold: interrupted by " + signalName(sig) + "\n"; stderr.String() != want {
				t.Fatalf("after %s: stderr %q, want %q", signalName(sig), stderr.String(), want)
			}
		})
	}
}

// Ctrl-C in the middle of a put: exit 130, the target as it was, no
// temporary file left.
func TestCLIInterruptedPut(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, "emu:"+filepath.Join(dir, "dev")+"?zone_size=4M&zones=16")
	sock := []string{"--socket", d.socket}
	old := filepath.Join(dir, "old")
	if err := os.WriteFile(old, []byte("the old content"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := runBinary(t, append([]string{"put", old, "keep"}, sock...)...); r.status != 0 {
		t.Fatalf("put: %+v", r)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(zonefoldBinary(t), append([]string{"put", fifo, "keep"}, sock...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Write(make([]byte, 2*copyChunk)); err != nil {
		t.Fatal(err)
	}
	// Wait until put has written into its temporary file.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(runBinary(t, append([]string{"ls", "-l"}, sock...)...).stdout, server.TempPrefix) {
		if time.Now().After(deadline) {
			t.Fatal("put wrote no temporary file")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGINT)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("put survives SIGINT")
	}
	if st := cmd.ProcessState.ExitCode(); st != 130 || stderr.String() != "zonefold: interrupted by SIGINT\n" {
		t.Fatalf("interrupted put: exit %d, stderr %q", st, stderr.String())
	}
	if r := runBinary(t, append([]string{"ls"}, sock...)...); r.stdout != "keep\n" {
		t.Fatalf("after an interrupted put, ls: %q", r.stdout)
	}
	copyPath := filepath.Join(dir, "copy")
	if r := runBinary(t, append([]string{"get", "keep", copyPath}, sock...)...); r.status != 0 {
		t.Fatalf("get: %+v", r)
	}
	if b, _ := os.ReadFile(copyPath); string(b) != "the old content" {
		t.Fatalf("an interrupted put changed its target: %q", b)
	}
}

// A put that runs out of space says so once, and leaves nothing behind.
func TestCLIPutOutOfSpace(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, "emu:"+filepath.Join(dir, "dev")+"?zone_size=1M&zones=8")
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, bytes.Repeat([]byte("incompressible enough "), 16<<20/22), 0o644); err != nil {
		t.Fatal(err)
	}
	// It names the file and says what is left of it and what to do:
	// "zonefold: write: no space left on device" did neither.
	r := runBinary(t, "put", big, "big", "--socket", d.socket)
	if r.status != 1 || !regexp.MustCompile(`^zonefold: put "big": write: no space left on device, [0-9.]+ (B|KiB|MiB) of [0-9.]+ MiB copied \(the device is full: remove files with 'zonefold rm' to make room; "big" is as it was and nothing of the copy is kept\)\n$`).MatchString(r.stderr) {
		t.Fatalf("put past the capacity: %+v", r)
	}
	checkErrorLine(t, []string{"put"}, r.stderr)
	if r = runBinary(t, "ls", "--socket", d.socket); r.stdout != "" {
		t.Fatalf("a put that ran out of space left %q", r.stdout)
	}
}
