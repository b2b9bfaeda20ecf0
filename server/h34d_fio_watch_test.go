package server_test

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// TestH34dProgressOfAWedgedDaemonReturns: runFioWatched's watchdog asks
// the daemon's metrics endpoint for its counters every tick. A daemon
// wedged so that it accepts the connection and never answers must make
// that look like no progress (-1), which the watchdog turns into a
// failed test with stacks, not hang the watchdog itself: http.Get had
// no timeout, and the test hung until go test's own -timeout.
func TestH34dProgressOfAWedgedDaemonReturns(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	conns := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c // held open, never answered
		}
	}()
	defer func() {
		for {
			select {
			case c := <-conns:
				c.Close()
			default:
				return
			}
		}
	}()
	d := &daemonProc{t: t, metrics: "http://" + ln.Addr().String() + "/metrics"}
	got := make(chan int64, 1)
	go func() { got <- d.progress() }()
	select {
	case p := <-got:
		if p != -1 {
			t.Fatalf("progress of a daemon that never answers: %d, want -1", p)
		}
	case <-time.After(4 * noProgress):
		t.Fatalf("progress of a daemon that never answers did not return within %v", 4*noProgress)
	}
}

// TestH34dFioWriteJobRecreatesAShorterFile: before a job that writes
// (without overwrite=1 or file_append=1), fio on a kernel file system
// unlinks a file shorter than the job's range and creates it anew
// (extend_file's "layout unlink"): on ext4 a 1 MiB file of data and
// `--rw=write --offset=2m --size=2m` leave 4 MiB whose first MiB is
// zeros, with fallocate=native (the default) and with fallocate=none.
// The engine kept the old data: it grew the file (native) or left it
// (none), so the first MiB was still the old file's.
func TestH34dFioWriteJobRecreatesAShorterFile(t *testing.T) {
	_, engine := fioEnv(t)
	d := newServe(t)
	ctx := context.Background()
	c := dialServe(t, d)
	defer c.Close()
	old := bytes.Repeat([]byte("old data"), 1<<20/8)
	for _, fa := range []string{"native", "none"} {
		name := "short-" + fa
		if err := c.CloseFile(ctx, writeFile(t, c, name, 0, old, false)); err != nil {
			t.Fatal(err)
		}
		out, err := runFioWatched(t, d, "--name=w", "--ioengine=external:"+engine, "--sock="+d.socket,
			"--filename="+name, "--rw=write", "--bs=64k", "--offset=2m", "--size=2m", "--fallocate="+fa)
		checkFio(t, "w", out, err, true)
		got := readWhole(t, c, name)
		if len(got) != 4<<20 {
			t.Fatalf("fallocate=%s: %d bytes after the job, want %d (ext4)\n%s", fa, len(got), 4<<20, out)
		}
		if !bytes.Equal(got[:1<<20], make([]byte, 1<<20)) {
			t.Fatalf("fallocate=%s: the first MiB is not zeros: the old, shorter file was kept, where fio on ext4 unlinks it\n%s", fa, out)
		}
	}
	d.stop()
}

// TestH34dFioCreateOnOpenReadFindsTheEnd: with create_on_open=1 fio lays
// nothing out (filesetup.c: no extend), and a job that reads opens its
// missing file with O_CREAT: on ext4 it reads an empty file, and fio's
// default engine (psync) fails the job at its first read ("full resid",
// EIO), the file left empty. The engine grew the file to the job's
// range at open: fio read 1 MiB of holes, zeros no one wrote, and
// exited 0.
func TestH34dFioCreateOnOpenReadFindsTheEnd(t *testing.T) {
	_, engine := fioEnv(t)
	d := newServe(t)
	c := dialServe(t, d)
	defer c.Close()
	for _, rw := range []string{"read", "randread"} {
		name := "coo-" + rw
		out, err := runFioWatched(t, d, "--name=coo", "--ioengine=external:"+engine, "--sock="+d.socket,
			"--filename="+name, "--rw="+rw, "--bs=4k", "--size=1m", "--iodepth=4", "--create_on_open=1")
		if err == nil {
			t.Fatalf("%s: fio exited 0 reading an empty file it created at open (ext4: EIO)\n%s", rw, out)
		}
		if !strings.Contains(out, "Input/output error") {
			t.Errorf("%s: fio failed, but not with EIO\n%s", rw, out)
		}
		if got := readWhole(t, c, name); len(got) != 0 {
			t.Errorf("%s: the file is %d bytes after the job; want it empty, as fio leaves it on ext4\n%s", rw, len(got), out)
		}
	}
	d.stop()
}

// TestH34dFioPreRead: pre_read=1 reads the job's files before its timed
// run, as fio does on a kernel file system (into the page cache there,
// through the daemon here, into its cache), and the job then runs:
// the daemon serves the file's bytes twice, once to the pre-read and
// once to the job. The engine refused pre_read=1 at init (fio's own
// pre-read lseeks and reads a local descriptor the engine has not got).
// A randread job with several files pre-reads each, and a write job
// with fsync_on_close (whose open hands fio a memfd) pre-reads too.
func TestH34dFioPreRead(t *testing.T) {
	_, engine := fioEnv(t)
	d := newServe(t)
	ctx := context.Background()
	c := dialServe(t, d)
	defer c.Close()
	for _, name := range []string{"pr", "pr2"} {
		if err := c.CloseFile(ctx, writeFile(t, c, name, 0, bytes.Repeat([]byte("pre-read"), 1<<20/8), false)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name      string
		args      []string
		preRead   float64 // bytes the pre-read reads
		jobReads  float64
		wantInOut string
	}{
		{"read", []string{"--filename=pr", "--rw=read", "--size=1m"}, 1 << 20, 1 << 20, "READ:"},
		{"randread-2files", []string{"--filename=pr:pr2", "--rw=randread", "--size=2m", "--iodepth=4"}, 2 << 20, 2 << 20, "READ:"},
		{"write-fsync-on-close", []string{"--filename=pr", "--rw=write", "--size=1m", "--fsync_on_close=1"}, 1 << 20, 0, "WRITE:"},
	} {
		before := d.metric("zonefold_server_read_bytes_total")
		out, err := runFioWatched(t, d, append([]string{"--name=pr", "--ioengine=external:" + engine,
			"--sock=" + d.socket, "--bs=4k", "--pre_read=1"}, tc.args...)...)
		checkFio(t, "pr", out, err, true)
		if !strings.Contains(out, tc.wantInOut) {
			t.Fatalf("%s: no %s line\n%s", tc.name, tc.wantInOut, out)
		}
		got := d.metric("zonefold_server_read_bytes_total") - before
		if want := tc.preRead + tc.jobReads; got != want {
			t.Fatalf("%s: the daemon served %v bytes of reads, want %v (the pre-read's and the job's)\n%s", tc.name, got, want, out)
		}
	}
	d.stop()
}
