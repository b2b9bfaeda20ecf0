package server_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/zonefold/zonefold/server"
)

// TestH33aFioFileAppend: file_append=1 makes a job's writes start at the
// file's end (fio's get_start_offset: the file's size), as on a kernel
// file system, where `--rw=write --size=1m --file_append=1` over a 1 MiB
// file leaves 2 MiB with the first MiB untouched. fio refused the job
// ("can't append/extent with IO engine zonefold"): the engine said
// FIO_NOEXTEND, which fio uses for nothing else with an engine like this
// one (extend_file, the other use, is never called for DISKLESSIO), and
// the daemon extends files. Each case appends to an existing file and to
// a missing one, and verifies what it appended.
func TestH33aFioFileAppend(t *testing.T) {
	_, engine := fioEnv(t)
	d := newServe(t)
	ctx := context.Background()
	c := dialServe(t, d)
	defer c.Close()
	old := bytes.Repeat([]byte("existing"), 1<<20/8)
	h, _, err := c.Open(ctx, "app", server.OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteAt(ctx, h, old, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseFile(ctx, h); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		was  int
	}{{"app", len(old)}, {"fresh", 0}} {
		out, err := runFioWatched(t, d, "--name=append", "--ioengine=external:"+engine, "--sock="+d.socket,
			"--filename="+tc.name, "--rw=write", "--bs=64k", "--size=1m", "--file_append=1",
			"--verify=crc32c", "--verify_fatal=1", "--verify_state_save=0")
		if err != nil {
			t.Fatalf("%s: fio file_append=1: %v\n%s", tc.name, err, out)
		}
		checkFio(t, "append", out, err, true)
		got := readWhole(t, c, tc.name)
		if len(got) != tc.was+1<<20 {
			t.Fatalf("%s: file_append=1 --size=1m over %d bytes left %d bytes; want %d\n%s", tc.name, tc.was, len(got), tc.was+1<<20, out)
		}
		if tc.was > 0 && !bytes.Equal(got[:tc.was], old) {
			t.Fatalf("%s: file_append=1 changed the file's existing bytes\n%s", tc.name, out)
		}
	}
	d.stop()
}

// TestH33aFioWriteJobSizedAsFallocateSays: before a job that writes, fio
// on a kernel file system allocates a file shorter than the job's range
// to the range's end (extend_file's fallocate_file) with fallocate=native
// (its default on Linux), posix or truncate, and leaves its size with
// keep or none: on ext4 `--rw=write --size=4m --io_size=1m` leaves 4 MiB,
// 1 MiB with fallocate=none. So a later job of the same run sees the
// size: a file_append=1 job after a 1 MiB write job (all jobs' files are
// set up before the first job runs) appends at 1 MiB, leaving 2 MiB. The
// engine grew a write job's file only as it wrote: 1 MiB and 1 MiB (the
// append job, set up while the file was missing, wrote at 0), and a read
// job without size= after a write job failed: no file at its setup.
func TestH33aFioWriteJobSizedAsFallocateSays(t *testing.T) {
	_, engine := fioEnv(t)
	d := newServe(t)
	c := dialServe(t, d)
	defer c.Close()
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"default", nil, 4 << 20},
		{"native", []string{"--fallocate=native"}, 4 << 20},
		{"posix", []string{"--fallocate=posix"}, 4 << 20},
		{"truncate", []string{"--fallocate=truncate"}, 4 << 20},
		{"keep", []string{"--fallocate=keep"}, 1 << 20},
		{"none", []string{"--fallocate=none"}, 1 << 20},
	} {
		args := append([]string{"--name=" + tc.name, "--ioengine=external:" + engine, "--sock=" + d.socket,
			"--filename=" + tc.name, "--rw=write", "--bs=64k", "--size=4m", "--io_size=1m"}, tc.args...)
		out, err := runFioWatched(t, d, args...)
		if err != nil {
			t.Fatalf("%s: fio: %v\n%s", tc.name, err, out)
		}
		if got := len(readWhole(t, c, tc.name)); got != tc.want {
			t.Fatalf("fallocate %s: --rw=write --size=4m --io_size=1m left %d bytes; want %d, as on a kernel file system\n%s", tc.name, got, tc.want, out)
		}
	}
	out, err := runFioWatched(t, d, "--ioengine=external:"+engine, "--sock="+d.socket, "--filename=seq", "--bs=64k", "--size=1m",
		"--name=write", "--rw=write", "--name=append", "--stonewall", "--rw=write", "--file_append=1")
	if err != nil {
		t.Fatalf("fio write, then append: %v\n%s", err, out)
	}
	if got := len(readWhole(t, c, "seq")); got != 2<<20 {
		t.Fatalf("a 1 MiB write job, then a 1 MiB file_append=1 job, left %d bytes; want 2 MiB, as on a kernel file system\n%s", got, out)
	}
	// A read job without size= after a write job of the same run reads
	// the file the writer's setup sized; it failed ("does not exist,
	// and the job gives neither size= nor filesize=").
	out, err = runFioWatched(t, d, "--ioengine=external:"+engine, "--sock="+d.socket, "--filename=back", "--bs=64k",
		"--name=write", "--rw=write", "--size=1m", "--name=read", "--stonewall", "--rw=read")
	if err != nil || !strings.Contains(out, "READ: bw=") || !strings.Contains(out, "io=1024KiB") {
		t.Fatalf("fio write with size=, then read without: %v\n%s", err, out)
	}
	d.stop()
}
