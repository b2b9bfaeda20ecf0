package server_test

// Faults while fio runs against the real daemon: SIGTERM in the middle
// of heavy writeback, and the file fio writes removed under it by
// another client.

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zonefold/zonefold/server"
)

// startFio starts fio with args against d, its output in the returned
// buffer; wait returns its exit error, failing the test if fio has not
// ended within limit (fio hung on a daemon that went away or refused it).
func startFio(t *testing.T, args ...string) (out *bytes.Buffer, wait func(limit time.Duration) error) {
	t.Helper()
	fio, _ := fioEnv(t)
	cmd := exec.Command(fio, args...)
	cmd.Dir = t.TempDir()
	out = &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			for _, pid := range descendants(cmd.Process.Pid) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			cmd.Process.Kill()
			<-done
		}
	})
	return out, func(limit time.Duration) error {
		t.Helper()
		select {
		case err := <-done:
			return err
		case <-time.After(limit):
			stacks := processStacks(cmd.Process.Pid)
			t.Fatalf("fio did not end within %v\nfio output:\n%s\nfio's kernel stacks:\n%s", limit, out, stacks)
			return nil
		}
	}
}

// awaitRequests waits until the daemon has taken in and answered at
// least n requests in all (its metrics), failing if it stands still for
// noProgress first.
func awaitRequests(t *testing.T, d *daemonProc, n int64) {
	t.Helper()
	last, since := d.progress(), time.Now()
	for last < n {
		time.Sleep(20 * time.Millisecond)
		if p := d.progress(); p != last {
			last, since = p, time.Now()
			continue
		}
		if time.Since(since) > noProgress {
			t.Fatalf("the daemon stands at %d of %d requests for %v\n%s", last, n, noProgress, d.stderr)
		}
	}
}

// TestFioSIGTERMDuringHeavyWriteback: SIGTERM reaches the daemon while
// fio, 64 deep, keeps its cache full of dirty data and never fsyncs. The
// daemon must write everything back, checkpoint and exit 0 within its
// grace periods; fio must end (with an error: its daemon went away), not
// hang; fsck must find the device clean; and the next daemon must serve
// the file, every block of which fio was told was written.
func TestFioSIGTERMDuringHeavyWriteback(t *testing.T) {
	_, engine := fioEnv(t)
	d := newServe(t)
	out, wait := startFio(t, "--name=heavy", "--ioengine=external:"+engine, "--sock="+d.socket,
		"--filename=heavy", "--rw=randwrite", "--bs=64k", "--size=512m", "--iodepth=64",
		"--time_based=1", "--runtime=60")
	awaitRequests(t, d, 20000) // well past the 64 MiB cache's worth
	d.stop()                   // SIGTERM: exit 0 with a checkpoint, or the test fails
	if err := wait(time.Minute); err == nil && !strings.Contains(out.String(), "err=") {
		t.Fatalf("fio ended cleanly though its daemon stopped under it:\n%s", out)
	}
	for _, bad := range []string{"double free", "SIGSEGV", "core dumped"} {
		if strings.Contains(out.String(), bad) {
			t.Fatalf("fio: %q in its output:\n%s", bad, out)
		}
	}
	fsckClean(t, d.device, "after SIGTERM during writeback")
	d, c, h, size := restartAndOpen(t, d, "heavy")
	if size != 512<<20 {
		t.Fatalf("heavy after the restart: %d bytes; want its 512 MiB", size)
	}
	ctx := context.Background()
	buf := make([]byte, 256<<10)
	for off := int64(0); off < size; off += int64(len(buf)) {
		if _, err := c.ReadAt(ctx, h, buf, off); err != nil {
			t.Fatalf("read heavy at %d after the restart: %v", off, err)
		}
	}
	c.Close()
	d.stop()
}

// TestFioFileRemovedWhileWriting: another client removes the file fio is
// writing, again and again, while fio's 64 reads and writes are in
// flight. fio goes on with the file it has open, unnamed (a removed
// file's handles keep working, docs/protocol.md), and no request of it
// fails; it must end, and the daemon must go on serving (a verified job
// on another file) and stop cleanly.
func TestFioFileRemovedWhileWriting(t *testing.T) {
	_, engine := fioEnv(t)
	d := newServe(t)
	out, wait := startFio(t, "--name=victim", "--ioengine=external:"+engine, "--sock="+d.socket,
		"--filename=victim", "--rw=randrw", "--bs=16k", "--size=32m", "--iodepth=64",
		"--time_based=1", "--runtime=3")
	awaitRequests(t, d, 2000)
	ctx := context.Background()
	c, err := server.Dial(ctx, d.socket, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	removed := 0
	for range 50 {
		if err := c.Remove(ctx, "victim"); err == nil {
			removed++
		}
		h, _, err := c.Open(ctx, "victim", server.OpenCreate)
		if err == nil {
			c.WriteAt(ctx, h, bytes.Repeat([]byte{9}, 8192), 0)
			c.CloseFile(ctx, h)
		}
	}
	if removed == 0 {
		t.Fatal("no remove of the file fio writes succeeded")
	}
	werr := wait(time.Minute)
	for _, bad := range []string{"double free", "SIGSEGV", "core dumped"} {
		if strings.Contains(out.String(), bad) {
			t.Fatalf("fio: %q in its output:\n%s", bad, out)
		}
	}
	// docs/protocol.md: a removed file's handles keep working.
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, "io_u error") {
			t.Fatalf("fio, its file removed: %q, want no error\n%s", line, out)
		}
	}
	if werr != nil {
		t.Errorf("fio, its file removed meanwhile: %v, want a clean end\n%s", werr, out)
	}
	t.Logf("fio after %d removes: %v", removed, werr)
	after, err := runFioWatched(t, d, fioArgs(t, d, "after", "--iodepth=32", "--verify=crc32c",
		"--verify_fatal=1", "--verify_state_save=0")...)
	checkFio(t, "after", after, err, false)
	d.stop()
}

// TestFioKill9DuringGCKeepsSyncedFile: file a is written by fio and
// fsynced, then half of it overwritten at random (fsynced too), so its
// zones hold garbage beside its live blocks. Then fio overwrites file b
// without fsync, 64 deep, on a device small enough that GC runs all the
// while, relocating a's live blocks among others, and the daemon is
// killed (SIGKILL) in the middle. After a restart every block of a must
// hold one of the two patterns fio wrote there and fsynced: never zeros,
// never a mix; and fsck must find the device clean.
func TestFioKill9DuringGCKeepsSyncedFile(t *testing.T) {
	_, engine := fioEnv(t)
	dir := t.TempDir()
	d := startServe(t, "emu:"+dir+"/dev?zone_size=4M&zones=32", dir+"/zf.sock")
	const aSize = 24 << 20
	job := func(name string, args ...string) []string {
		return append([]string{"--name=" + name, "--ioengine=external:" + engine, "--sock=" + d.socket, "--bs=4k"}, args...)
	}
	out, err := runFioWatched(t, d, job("a1", "--filename=a", "--rw=write", "--size=24m", "--iodepth=32",
		"--buffer_pattern=0x11", "--end_fsync=1")...)
	checkFio(t, "a1", out, err, false)
	out, err = runFioWatched(t, d, job("a2", "--filename=a", "--rw=randwrite", "--size=24m", "--io_size=12m",
		"--iodepth=32", "--buffer_pattern=0x22", "--end_fsync=1")...)
	checkFio(t, "a2", out, err, false)
	gcBefore := d.metric("zonefold_gc_written_bytes_total")
	_, wait := startFio(t, job("b", "--filename=b", "--rw=randwrite", "--size=40m", "--iodepth=64",
		"--time_based=1", "--runtime=60")...)
	// Wait until GC has copied 8 MiB, then kill.
	deadline := time.Now().Add(4 * noProgress)
	for d.metric("zonefold_gc_written_bytes_total") < gcBefore+8<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("GC copied %v bytes in %v of fio's overwrites; want 8 MiB\n%s",
				d.metric("zonefold_gc_written_bytes_total")-gcBefore, 4*noProgress, d.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	d.kill9()
	wait(time.Minute) // fio fails: its daemon is gone
	fsckClean(t, d.device, "after kill -9 during GC")
	d, c, h, size := restartAndOpen(t, d, "a")
	if size != aSize {
		t.Fatalf("a after kill -9: size %d; want %d", size, aSize)
	}
	ctx := context.Background()
	buf := make([]byte, 256<<10)
	counts := map[byte]int{}
	for off := int64(0); off < aSize; off += int64(len(buf)) {
		if _, err := c.ReadAt(ctx, h, buf, off); err != nil {
			t.Fatalf("read a at %d: %v", off, err)
		}
		for blk := 0; blk < len(buf); blk += 4096 {
			b := buf[blk : blk+4096]
			if (b[0] != 0x11 && b[0] != 0x22) || !bytes.Equal(b, bytes.Repeat(b[:1], 4096)) {
				t.Fatalf("a's block at %d after kill -9 during GC: starts % x, want all 0x11 or all 0x22", off+int64(blk), b[:16])
			}
			counts[b[0]]++
		}
	}
	if counts[0x22] == 0 || counts[0x11] == 0 {
		t.Fatalf("a's blocks: %v; want both patterns", counts)
	}
	d.stop()
}

// metric is the value of one of the daemon's Prometheus metrics (the
// first series of it), or -1.
func (d *daemonProc) metric(name string) float64 {
	resp, err := metricsClient.Get(d.metrics)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return -1
}

// TestFioPastTheDeviceThenRemove: one fio job larger than the device,
// 64 deep. fio must fail with ENOSPC (not hang, not EIO), the daemon go
// on serving, and removing the file give the space back: the same
// device then takes a verified job of most of its size.
func TestFioPastTheDeviceThenRemove(t *testing.T) {
	_, engine := fioEnv(t)
	dir := t.TempDir()
	d := startServe(t, "emu:"+dir+"/dev?zone_size=4M&zones=32", dir+"/zf.sock")
	job := func(name string, args ...string) []string {
		return append([]string{"--name=" + name, "--ioengine=external:" + engine, "--sock=" + d.socket,
			"--filename=" + name, "--iodepth=64"}, args...)
	}
	out, err := runFioWatched(t, d, job("huge", "--rw=write", "--bs=128k", "--size=200m")...)
	if err == nil || !strings.Contains(out, "No space left on device") {
		t.Fatalf("fio past the device: %v, want ENOSPC\n%s", err, out)
	}
	if strings.Contains(out, "Input/output error") {
		t.Fatalf("fio past the device got EIO: the device is full, not failing\n%s", out)
	}
	ctx := context.Background()
	c, err := server.Dial(ctx, d.socket, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(ctx, "huge"); err != nil {
		t.Fatalf("remove on a full device: %v", err)
	}
	c.Close()
	out, err = runFioWatched(t, d, job("after", "--rw=randwrite", "--bs=16k", "--size=80m",
		"--verify=crc32c", "--verify_fatal=1", "--verify_state_save=0")...)
	checkFio(t, "after", out, err, false)
	if !strings.Contains(out, "READ: bw=") {
		t.Fatalf("nothing verified after the remove:\n%s", out)
	}
	d.stop()
}

// TestFioFsyncEachWriteKill9MidRun: fio writes a file in order, one
// write at a time, each followed by an fsync (fsync=1), and the daemon is
// killed (SIGKILL) in the middle. Every write fio saw fsynced must be
// there after a restart: the file holds fio's pattern from its start up
// to at least the writes the daemon had answered, then nothing (the
// write in flight at the kill may be there or not), never a block
// missing below one that survived.
func TestFioFsyncEachWriteKill9MidRun(t *testing.T) {
	_, engine := fioEnv(t)
	d := newServe(t)
	_, wait := startFio(t, "--name=seq", "--ioengine=external:"+engine, "--sock="+d.socket,
		"--filename=seq", "--rw=write", "--bs=4k", "--size=256m", "--fsync=1", "--iodepth=1",
		"--buffer_pattern=0x5a", "--fallocate=none")
	// requests in plus replies out: 4 per write and its fsync, besides
	// the job's open (fallocate=none: no grow of the file at setup, whose
	// open, truncate and close would count too)
	const counted = 4000
	awaitRequests(t, d, counted)
	d.kill9()
	wait(time.Minute)
	d, c, h, size := restartAndOpen(t, d, "seq")
	ctx := context.Background()
	full := bytes.Repeat([]byte{0x5a}, 4096)
	zero := make([]byte, 4096)
	buf := make([]byte, 4096)
	written := int64(-1) // blocks of the pattern from the start
	for off := int64(0); off < size; off += 4096 {
		if _, err := c.ReadAt(ctx, h, buf, off); err != nil {
			t.Fatalf("read seq at %d: %v", off, err)
		}
		switch {
		case written < 0 && bytes.Equal(buf, full):
		case written < 0 && bytes.Equal(buf, zero):
			written = off / 4096
		case bytes.Equal(buf, zero):
		default:
			t.Fatalf("seq's block at %d after kill -9: starts % x; want fio's pattern up to a point, then zeros (first zero block %d)",
				off, buf[:8], written)
		}
	}
	if written < 0 {
		written = size / 4096
	}
	if least := int64(counted/4 - 1); written < least {
		t.Fatalf("%d blocks of seq after kill -9; the daemon had answered at least %d writes and their fsyncs", written, least)
	}
	t.Logf("%d blocks survived (size %d)", written, size)
	d.stop()
}

// fsckClean runs zonefold fsck on device (no daemon on it) and fails the
// test unless it finds the device clean.
//
// Built with -race, a process sleeps a second before it exits (GORACE
// atexit_sleep_ms, for races in goroutines still running then); fsck's
// work is done when it has reported, and a race found while it checked
// still fails it (exit 66), so it exits at once: the kill -9 tests run
// fsck after every kill, where the sleep was a third of their time.
func fsckClean(t *testing.T, device, when string) {
	t.Helper()
	fsck := execTestMain("zonefold", "fsck", device)
	fsck.Env = append(fsck.Env, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	if b, err := fsck.CombinedOutput(); err != nil {
		t.Fatalf("fsck %s: %v\n%s", when, err, b)
	}
}

// restartAndOpen starts a daemon again on d's device and socket and opens
// name through a new client, closed when the test ends: the daemon, the
// client, the handle and the file's size.
func restartAndOpen(t *testing.T, d *daemonProc, name string) (*daemonProc, *server.Client, uint32, int64) {
	t.Helper()
	d = startServe(t, d.device, d.socket)
	ctx := context.Background()
	c, err := server.Dial(ctx, d.socket, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	h, size, err := c.Open(ctx, name, 0)
	if err != nil {
		t.Fatalf("open %s after the restart: %v", name, err)
	}
	return d, c, h, size
}
