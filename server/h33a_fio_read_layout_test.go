package server_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zonefold/zonefold/server"
)

// TestH33aFioReadJobLaysOutTheFileWithData: on a kernel file system fio
// lays out a missing or short file for a job that reads (fio's
// extend_file: any rw= with reads, from the file's start to the end of
// the job's range, with fio's buffer contents), so that the job reads
// written blocks ("Laying out IO file"). The engine only grew the file:
// `fio --rw=randread --size=8m` through the daemon read 8 MiB of holes
// (zeros the daemon never read from the device). Each case below must
// leave the file at the end of the job's range with fio's data in the
// blocks the job did not write; an existing shorter file is laid out
// again from its start, as fio's O_TRUNC layout does.
func TestH33aFioReadJobLaysOutTheFileWithData(t *testing.T) {
	_, engine := fioEnv(t)
	d := newServe(t)
	ctx := context.Background()
	c := dialServe(t, d)
	defer c.Close()
	// An existing file shorter than the job's range: 1 MiB of zeros,
	// written (so not a hole).
	h, _, err := c.Open(ctx, "short", server.OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteAt(ctx, h, make([]byte, 1<<20), 0); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseFile(ctx, h); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"read", []string{"--rw=read"}},
		{"randread", []string{"--rw=randread"}},
		{"randrw", []string{"--rw=randrw", "--io_size=512k"}},
		{"rw", []string{"--rw=rw", "--io_size=512k"}},
		{"short", []string{"--rw=randread"}},
	} {
		args := append([]string{"--name=" + tc.name, "--ioengine=external:" + engine, "--sock=" + d.socket,
			"--filename=" + tc.name, "--bs=4k", "--size=4m", "--io_size=1m"}, tc.args...)
		out, err := runFioWatched(t, d, args...)
		if err != nil {
			t.Fatalf("%s: fio: %v\n%s", tc.name, err, out)
		}
		got := readWhole(t, c, tc.name)
		if len(got) != 4<<20 {
			t.Fatalf("%s: fio --size=4m left a file of %d bytes; want 4 MiB\n%s", tc.name, len(got), out)
		}
		// The job read or wrote at most 1 MiB: every 64 KiB of the file
		// must hold data, as after fio's layout on a kernel file system.
		for off := 0; off < len(got); off += 64 << 10 {
			if bytes.Count(got[off:off+64<<10], []byte{0}) == 64<<10 {
				t.Fatalf("%s: bytes [%d, %d) of the file are zeros: grown, not laid out with data as fio does for a job that reads\n%s",
					tc.name, off, off+64<<10, out)
			}
		}
	}
	d.stop()
}

// TestH33aFioSIGINTDuringLayoutRemovesTheFile: fio interrupted (Ctrl-C,
// SIGINT) while it lays a file out removes the file it was laying out
// (extend_file: "terminate unlink"), on a kernel file system even an
// existing shorter file it had begun to rewrite: `fio --rw=randread
// --size=3g` on ext4, SIGINT during "Laying out IO file", leaves no file
// and exits 128. The engine stopped the layout and left the partial file
// (fsynced, as if laid out). Deterministic: the daemon holds the
// layout's first write until fio has had SIGINT.
func TestH33aFioSIGINTDuringLayoutRemovesTheFile(t *testing.T) {
	for _, tc := range []struct{ name, rw, overwrite string }{
		{"read", "randread", "0"},
		{"overwrite", "write", "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fio, engine := fioEnv(t)
			socket := server.NewTestDaemon(t)
			ctx := context.Background()
			c, err := server.Dial(ctx, socket, 4<<20)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// An existing file shorter than the job's range, as well.
			h, _, err := c.Open(ctx, "f", server.OpenCreate)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.WriteAt(ctx, h, bytes.Repeat([]byte{7}, 1<<20), 0); err != nil {
				t.Fatal(err)
			}
			if err := c.CloseFile(ctx, h); err != nil {
				t.Fatal(err)
			}
			held, release := server.HoldOps(t, server.OpWrite)
			cmd, out, fioDone := startFioHeld(t, held, "the layout's first write", fio, "--name=l",
				"--ioengine=external:"+engine, "--sock="+socket,
				"--filename=f", "--rw="+tc.rw, "--overwrite="+tc.overwrite, "--bs=4k", "--size=64m")
			if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			for !strings.Contains(out.String(), "terminating on signal") {
				select {
				case err := <-fioDone:
					t.Fatalf("fio ended on SIGINT without saying so: %v\n%s", err, out)
				case <-time.After(10 * time.Millisecond):
				}
			}
			release()
			select {
			case err := <-fioDone:
				if err == nil {
					t.Fatalf("fio interrupted exited 0\n%s", out)
				}
			case <-time.After(time.Minute):
				t.Fatalf("fio did not end within a minute of SIGINT\n%s", out)
			}
			if st, err := c.Stat(ctx, "f"); err == nil {
				t.Fatalf("fio interrupted while laying f out left it (%d bytes); fio removes the file it was laying out\n%s", st.Size, out)
			} else if !errors.Is(err, syscall.ENOENT) {
				t.Fatal(err)
			}
		})
	}
}

// TestH33aFioReadJobDoesNotCreateAtOpen: fio opens a file for a job
// that only reads without O_CREAT (unless create_on_open=1): the layout
// before the job creates it. So on a kernel file system a read job with
// loops=3 and unlink_each_loop=1 fails at its second loop's open (ENOENT:
// the first loop's end removed the file). The engine created the file
// again at each open and grew it: the later loops read holes, exit 0,
// and left a 1 MiB file of zeros.
func TestH33aFioReadJobDoesNotCreateAtOpen(t *testing.T) {
	_, engine := fioEnv(t)
	d := newServe(t)
	out, err := runFioWatched(t, d, "--name=loops", "--ioengine=external:"+engine, "--sock="+d.socket,
		"--filename=loops", "--rw=randread", "--bs=4k", "--size=1m", "--loops=3", "--unlink_each_loop=1")
	if err == nil || !strings.Contains(out, "No such file or directory") {
		t.Fatalf("a read job's second loop, its file removed by unlink_each_loop=1: %v; want it to fail with ENOENT, as on a kernel file system\n%s", err, out)
	}
	c := dialServe(t, d)
	defer c.Close()
	if st, err := c.Stat(context.Background(), "loops"); err == nil {
		t.Fatalf("the read job created its removed file again at open (%d bytes)\n%s", st.Size, out)
	} else if !errors.Is(err, syscall.ENOENT) {
		t.Fatal(err)
	}
	d.stop()
}
