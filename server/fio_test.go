package server_test

// End-to-end tests: the real daemon (this test binary re-executed as
// `zonefold serve`, so SIGTERM and the exit status are the real ones),
// the real fio, and fio/engine.c built against it by `make fio-engine`.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zonefold/zonefold/cli"
	"github.com/zonefold/zonefold/internal/syncbuf"
	"github.com/zonefold/zonefold/server"
)

// TestMain lets the test binary stand in for the zonefold binary
// (ZONEFOLD_TEST_MAIN=1; as a daemon, with the crash points
// installCrashHook reads from the environment) and for a client that is
// killed mid-batch.
func TestMain(m *testing.M) {
	switch os.Getenv("ZONEFOLD_TEST_MAIN") {
	case "zonefold":
		if err := limitFileSize(os.Getenv("ZONEFOLD_TEST_FSIZE")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := installCrashHook(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		cli.Exit(os.Args[1:])
	case "midbatch-client":
		os.Exit(midBatchClient(os.Args[1]))
	case "mixed-client":
		os.Exit(mixedClient(os.Args[1], os.Args[2]))
	case "h26b-ckptkill":
		os.Exit(h26bCkptKillDaemon(os.Args[1:]))
	case "emfile-client":
		os.Exit(emfileClient(os.Args[1]))
	}
	os.Exit(m.Run())
}

// execTestMain runs the test binary in mode (see TestMain) with args.
func execTestMain(mode string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "ZONEFOLD_TEST_MAIN="+mode)
	return cmd
}

// midBatchClient sends a full batch of writes, says so, and waits to be
// killed with it in flight.
func midBatchClient(socket string) int {
	ctx := context.Background()
	c, err := server.Dial(ctx, socket, 4<<20)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	h, _, err := c.Open(ctx, "killed-mid-batch", server.OpenCreate)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	reqs := make([]server.Request, server.MaxBatch)
	for i := range reqs {
		reqs[i] = server.Request{Tag: uint64(i), Op: server.OpWrite, Handle: h, Off: uint64(i) << 14, Len: 16 << 10}
	}
	if err := c.Submit(reqs); err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println("sent")
	time.Sleep(time.Minute)
	return 0
}

// fioEnv finds fio and the engine; without them the tests skip, unless
// ZONEFOLD_REQUIRE_FIO is set (make test sets it), where they fail.
func fioEnv(t *testing.T) (fio, engine string) {
	t.Helper()
	fail := t.Skipf
	if os.Getenv("ZONEFOLD_REQUIRE_FIO") != "" {
		fail = t.Fatalf
	}
	fio, err := exec.LookPath("fio")
	if err != nil {
		fail("fio is not installed (make fio-engine installs it): %v", err)
	}
	engine = os.Getenv("ZONEFOLD_FIO_ENGINE")
	if engine == "" {
		engine, _ = filepath.Abs("../build/fio/zonefold-engine.so")
	}
	if _, err := os.Stat(engine); err != nil {
		fail("the fio engine is not built (make fio-engine): %v", err)
	}
	return fio, engine
}

// daemonProc is `zonefold serve` in a child process.
type daemonProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	socket string
	device string
	stderr *syncbuf.Buffer
	exited chan error
	// metrics is the URL of its Prometheus metrics.
	metrics string
}

func startServe(t *testing.T, device, socket string, env ...string) *daemonProc {
	t.Helper()
	return startServeCache(t, device, socket, "64M", env...)
}

// startServeCache is startServe with a cache of the given size.
func startServeCache(t *testing.T, device, socket, cache string, env ...string) *daemonProc {
	t.Helper()
	cmd := execTestMain("zonefold", "serve", device, "--socket", socket, "--format", "--cache", cache, "--log-info",
		"--metrics", "127.0.0.1:0")
	cmd.Env = append(cmd.Env, env...)
	d := &daemonProc{t: t, cmd: cmd, socket: socket, device: device, stderr: &syncbuf.Buffer{}, exited: make(chan error, 1)}
	cmd.Stderr = d.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ok := false
		for sc.Scan() {
			// "metrics on URL" comes right after "serving ...".
			if url, found := strings.CutPrefix(sc.Text(), "metrics on "); found && !ok {
				d.metrics = url
				ok = true
				ready <- true
			}
		}
		if !ok {
			ready <- false
		}
		d.exited <- cmd.Wait()
	}()
	if !<-ready {
		t.Fatalf("daemon did not start: %v\n%s", <-d.exited, d.stderr)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-d.exited
		}
	})
	return d
}

// stop sends SIGTERM and requires a clean exit.
func (d *daemonProc) stop() {
	d.t.Helper()
	d.stopWith(syscall.SIGTERM)
}

// stopWith sends sig (one that stops the daemon cleanly) and requires a
// clean exit.
func (d *daemonProc) stopWith(sig os.Signal) {
	d.t.Helper()
	if err := d.cmd.Process.Signal(sig); err != nil {
		d.t.Fatal(err)
	}
	select {
	case err := <-d.exited:
		if err != nil {
			d.t.Fatalf("daemon exit after %v: %v\n%s", sig, err, d.stderr)
		}
	case <-time.After(2 * time.Minute):
		d.t.Fatalf("daemon did not exit after %v\n%s", sig, d.stderr)
	}
	if !strings.Contains(d.stderr.String(), "engine flushed and checkpointed") {
		d.t.Fatalf("daemon exited without a checkpoint:\n%s", d.stderr)
	}
}

func newServe(t *testing.T) *daemonProc {
	dir := t.TempDir()
	return startServe(t, fmt.Sprintf("emu:%s?zone_size=16M&zones=64", filepath.Join(dir, "dev")), filepath.Join(dir, "zf.sock"))
}

// fioCmd is fio running a job file of testdata/fio against d.
func fioCmd(t *testing.T, d *daemonProc, job string, args ...string) *exec.Cmd {
	fio, engine := fioEnv(t)
	jobPath, err := filepath.Abs(filepath.Join("../testdata/fio", job))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(fio, append(args, jobPath)...)
	cmd.Dir = t.TempDir() // fio's state files land here
	cmd.Env = append(os.Environ(), "ZONEFOLD_FIO_ENGINE="+engine, "ZONEFOLD_SOCK="+d.socket)
	return cmd
}

// runFio runs a job and requires exit 0, no errors and, when verifying,
// that data was read back.
func runFio(t *testing.T, d *daemonProc, job string, args ...string) string {
	t.Helper()
	out, err := fioCmd(t, d, job, args...).CombinedOutput()
	checkFio(t, job, string(out), err, !slices.Contains(args, "--do_verify=0"))
	return string(out)
}

func checkFio(t *testing.T, job, out string, err error, readBack bool) {
	t.Helper()
	if err != nil {
		t.Fatalf("fio %s: %v\n%s", job, err, out)
	}
	if strings.Contains(out, "verify:") || !strings.Contains(out, "err= 0") {
		t.Fatalf("fio %s reported errors:\n%s", job, out)
	}
	if readBack && strings.HasPrefix(job, "verify-") && !strings.Contains(out, "READ: bw=") {
		t.Fatalf("fio %s read nothing back:\n%s", job, out)
	}
}

func verifyJobs(t *testing.T) []string {
	jobs, err := filepath.Glob("../testdata/fio/verify-*.fio")
	if err != nil || len(jobs) < 3 {
		t.Fatalf("verify jobs: %v, %v", jobs, err)
	}
	for i := range jobs {
		jobs[i] = filepath.Base(jobs[i])
	}
	return jobs
}

// TestFioVerifyJobs runs every verify-* job, one at a time (processes
// and --thread), then all at once against one daemon.
func TestFioVerifyJobs(t *testing.T) {
	fioEnv(t)
	d := newServe(t)
	jobs := verifyJobs(t)
	for _, job := range jobs {
		t.Run(job, func(t *testing.T) { runFio(t, d, job) })
	}
	t.Run("threads", func(t *testing.T) { runFio(t, d, "verify-randwrite-8k.fio", "--thread") })
	t.Run("all at once", func(t *testing.T) {
		var wg sync.WaitGroup
		outs := make([]string, len(jobs))
		errs := make([]error, len(jobs))
		for i, job := range jobs {
			wg.Go(func() {
				b, err := fioCmd(t, d, job).CombinedOutput()
				outs[i], errs[i] = string(b), err
			})
		}
		wg.Wait()
		for i, job := range jobs {
			checkFio(t, job, outs[i], errs[i], true)
		}
	})
	d.stop()
}

// TestFioRestartBetweenWriteAndVerify writes with checksums, stops the
// daemon with SIGTERM, starts a new one, and verifies; then damages a
// file to show that the verification would have noticed.
func TestFioRestartBetweenWriteAndVerify(t *testing.T) {
	fioEnv(t)
	d := newServe(t)
	jobs := []string{"verify-randwrite-8k.fio", "verify-mixed-bs.fio", "verify-4x1m-fsync.fio"}
	for _, job := range jobs {
		out := runFio(t, d, job, "--do_verify=0")
		if strings.Contains(out, "READ: bw=") {
			t.Fatalf("write phase of %s read back already", job)
		}
	}
	d.stop()
	d = startServe(t, d.device, d.socket)
	for _, job := range jobs {
		runFio(t, d, job, "--verify_only=1")
	}
	// A verification that cannot fail proves nothing: overwrite one block
	// and the same verify must fail.
	ctx := context.Background()
	c, err := server.Dial(ctx, d.socket, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	h, _, err := c.Open(ctx, "verify-mixed-bs", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteAt(ctx, h, bytes.Repeat([]byte{0xa5}, 64<<10), 1<<20); err != nil {
		t.Fatal(err)
	}
	c.Close()
	out, err := fioCmd(t, d, "verify-mixed-bs.fio", "--verify_only=1").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "verify:") {
		t.Fatalf("fio verified a damaged file: %v\n%s", err, out)
	}
	d.stop()
}

// TestFioSurvivesMalformedClients runs a verify job while other clients
// send random bytes, truncated headers and bad requests, and one client
// is killed (SIGKILL) with a batch in flight.
func TestFioSurvivesMalformedClients(t *testing.T) {
	fioEnv(t)
	d := newServe(t)
	job := fioCmd(t, d, "verify-seq128k.fio", "--loops=3")
	var jobOut bytes.Buffer
	job.Stdout, job.Stderr = &jobOut, &jobOut
	if err := job.Start(); err != nil {
		t.Fatal(err)
	}
	jobDone := make(chan error, 1)
	go func() { jobDone <- job.Wait() }()

	attacks := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"random bytes before hello", func(t *testing.T) { rawSend(t, d.socket, false, randomBytes(t, 200)) }},
		{"random bytes after hello", func(t *testing.T) { rawSend(t, d.socket, true, randomBytes(t, 3*server.RequestSize+7)) }},
		{"truncated header", func(t *testing.T) { rawSend(t, d.socket, true, make([]byte, server.RequestSize-1)) }},
		{"garbage requests", func(t *testing.T) { rawSend(t, d.socket, true, randomBytes(t, 64*server.RequestSize)) }},
		{"killed mid-batch", func(t *testing.T) { killMidBatch(t, d.socket) }},
	}
	for round := 0; ; round++ {
		for _, a := range attacks {
			t.Run(a.name, a.run)
		}
		select {
		case err := <-jobDone:
			checkFio(t, "verify-seq128k.fio", jobOut.String(), err, true)
			if round == 0 {
				t.Log("fio finished before a second round of attacks")
			}
			logs := d.stderr.String()
			for _, want := range []string{"closing connection", "malformed request"} {
				if !strings.Contains(logs, want) {
					t.Errorf("daemon logs lack %q:\n%s", want, logs)
				}
			}
			d.stop()
			return
		default:
		}
	}
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// rawSend connects, optionally says hello, sends msg and reads until the
// daemon answers or closes.
func rawSend(t *testing.T, socket string, hello bool, msg []byte) {
	nc, err := net.Dial("unixpacket", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(time.Minute))
	buf := make([]byte, 64<<10)
	if hello {
		h := server.Hello{Magic: server.Magic, Version: server.VersionFraming, Region: 1 << 20}
		hb := make([]byte, server.HelloSize)
		h.Encode(hb)
		if _, err := nc.Write(hb); err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := nc.Write(msg); err != nil {
		return // the daemon may already have closed us
	}
	if _, err := nc.Read(buf); err != nil && err != io.EOF {
		t.Logf("read after garbage: %v", err)
	}
}

func killMidBatch(t *testing.T, socket string) {
	cmd := startSentClient(t, "midbatch-client", socket)
	cmd.Process.Kill()
	cmd.Wait()
}

// startSentClient starts this test binary as the client mode of TestMain
// with args and returns once it says it has sent its requests; the
// caller kills it.
func startSentClient(t *testing.T, mode string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := execTestMain(mode, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "sent\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("%s %v: %q", mode, args, line)
	}
	return cmd
}

// TestPutIsDurable kills the daemon (SIGKILL: no flush, no checkpoint)
// right after `zonefold put` returns: the file is there after a restart.
func TestPutIsDurable(t *testing.T) {
	d := newServe(t)
	local := filepath.Join(t.TempDir(), "local")
	want := randomBytes(t, 3<<20+123)
	if err := os.WriteFile(local, want, 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	if code := cli.Main([]string{"put", local, "precious", "--socket", d.socket}, io.Discard, &stderr); code != 0 {
		t.Fatalf("put: %s", stderr.String())
	}
	d.cmd.Process.Kill()
	<-d.exited
	d = startServe(t, d.device, d.socket)
	copyPath := filepath.Join(t.TempDir(), "copy")
	if code := cli.Main([]string{"get", "precious", copyPath, "--socket", d.socket}, io.Discard, &stderr); code != 0 {
		t.Fatalf("get after SIGKILL: %s", stderr.String())
	}
	if got, err := os.ReadFile(copyPath); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("after SIGKILL: %d bytes, %v; want the %d bytes put wrote", len(got), err, len(want))
	}
	d.stop()
}
