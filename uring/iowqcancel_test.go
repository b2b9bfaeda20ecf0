package uring

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestIOWQCancelIsReal makes the kernel itself cancel an fsync: a process
// of an unprivileged user whose RLIMIT_NPROC leaves no room for another
// thread cannot get an io-wq worker; io-wq retries the worker a few times,
// then completes the fsync it never ran with ECANCELED (kernels with the
// "limit retrying worker initialisation" change; older ones retry for
// ever, so the child is killed after a while). The test runs the ring in a
// child process (re-executed test binary, uid nobody) and only as root.
func TestIOWQCancelIsReal(t *testing.T) {
	if os.Getenv("ZONEFOLD_IOWQ_CHILD") == "1" {
		iowqChild()
		return
	}
	if os.Getuid() != 0 {
		t.Skip("needs root to start a child as another user")
	}
	dir, err := os.MkdirTemp("", "iowq")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang guard only
	defer cancel()
	// A copy of the test binary that uid 65534 may run (go test builds
	// it in a private folder).
	bin, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "uring.test")
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, exe, "-test.run=^TestIOWQCancelIsReal$")
	cmd.Env = append(os.Environ(), "ZONEFOLD_IOWQ_CHILD=1", "ZONEFOLD_IOWQ_DIR="+dir, "GOMAXPROCS=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	t.Logf("child (uid 65534): %v\n%s", err, out)
	switch {
	case ctx.Err() != nil:
		t.Skip("the kernel retries io-wq worker creation for ever (no cancel to see)")
	case err != nil && strings.Contains(err.Error(), "permission denied"):
		t.Skipf("cannot run the test binary as uid 65534: %v", err)
	case strings.Contains(string(out), "failed to create new OS thread"):
		t.Skip("the Go runtime needed a thread while the limit was low")
	case err != nil:
		t.Fatalf("child failed: %v", err)
	case strings.Contains(string(out), "kernel cancels: 0"):
		t.Skip("the kernel ran the fsync without canceling it")
	}
}

func iowqChild() {
	fail := func(what string, err error) {
		println("child:", what+":", errString(err))
		os.Exit(2)
	}
	r, err := New(Options{Entries: 8})
	if err != nil {
		fail("New", err)
	}
	f, err := os.Create(filepath.Join(os.Getenv("ZONEFOLD_IOWQ_DIR"), "f"))
	if err != nil {
		fail("create", err)
	}
	fd := FD(int(f.Fd()))
	// Written without the ring, which must not punt anything to io-wq
	// before the fsync (a worker left from then would serve it); a NOP
	// sets up the ring's task context.
	if _, err := f.Write([]byte("hello")); err != nil {
		fail("write", err)
	}
	if _, err := r.do("nop", r.Nop); err != nil {
		fail("nop", err)
	}
	// Idle threads for the Go runtime to reuse while no new one can be
	// made: goroutines blocked in syscalls at once each hold one.
	var pipes [6][2]int
	done := make(chan struct{})
	for i := range pipes {
		if err := unix.Pipe(pipes[i][:]); err != nil {
			fail("pipe", err)
		}
		go func() {
			var b [1]byte
			_, _ = unix.Read(pipes[i][0], b[:])
			done <- struct{}{}
		}()
	}
	for i := 0; threadCount() < 8 && i < 1e6; i++ {
		runtime.Gosched()
	}
	for i := range pipes {
		_, _ = unix.Write(pipes[i][1], []byte{1})
		<-done
	}
	old := unix.Rlimit{}
	_ = unix.Getrlimit(unix.RLIMIT_NPROC, &old)
	n := uint64(threadCount())
	if err := unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: n, Max: old.Max}); err != nil {
		fail("setrlimit", err)
	}
	// Enter the fsync holding the submission lock, so that the ring's
	// resubmission waits until the limit is lifted again.
	w := NewWaiter()
	r.Plug()
	if err := r.Fsync(fd, false, w); err != nil {
		fail("fsync", err)
	}
	r.sqMu.Lock()
	r.plugDepth--
	if err := r.enterLocked(); err != nil {
		fail("enter", err)
	}
	// Until the kernel canceled it: a resubmission waits for the lock, a
	// completion delivered as it came (no resubmission) is the result.
	var res Result
	got := false
	for !got && r.Stats().KernelCancels == 0 {
		select {
		case res = <-w.ch:
			got = true
		default:
			runtime.Gosched()
		}
	}
	_ = unix.Setrlimit(unix.RLIMIT_NPROC, &old)
	r.sqMu.Unlock()
	if !got {
		res = r.Wait(w)
	}
	println("child: threads", n, "kernel cancels:", r.Stats().KernelCancels, "fsync:", errString(res.Err("fsync")))
	if res.Res != 0 {
		os.Exit(3)
	}
	os.Exit(0)
}

func threadCount() int {
	st, _ := os.ReadFile("/proc/self/status")
	n := 0
	for _, l := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return n
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
