package server_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
)

// TestH39bFioLayoutSharesOneConnection: fio sets files up one at a time
// (the engine's setup and prepopulate_file), and the engine connected to
// the daemon for each file: fio --create_only=1 --nrfiles=4200
// --filesize=4k took 8-13 s, 4201 connections (the hello, the daemon's
// region mapped and unmapped, each time). Now a process's setup calls
// share one connection: the daemon counts at most one per job and one
// per process or thread that sets files up (a thread may make another if
// one job's start closes the idle one while another job is setting up,
// create_serialize=0 with --thread), and every file is laid out.
func TestH39bFioLayoutSharesOneConnection(t *testing.T) {
	_, engine := fioEnv(t)
	d := newServe(t)
	ctx := context.Background()
	c := dialServe(t, d)
	defer c.Close()
	const files = 200
	cases := []struct {
		name string
		args []string
		// most is the most connections the run may make.
		most int
	}{
		// fio's parent lays the files out; the job connects.
		{"create_only", []string{"--create_only=1", "--rw=write", "--filesize=4k"}, 2},
		{"read", []string{"--rw=read", "--filesize=8k"}, 2},
		{"two-jobs", []string{"--create_only=1", "--rw=write", "--filesize=4k", "--numjobs=2"}, 3},
		{"threads-own-setup", []string{"--create_only=1", "--rw=write", "--filesize=4k", "--numjobs=2",
			"--thread", "--create_serialize=0"}, 6},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := d.metric("zonefold_server_connections_total")
			out, err := runFioWatched(t, d, append([]string{"--name=" + tc.name, "--ioengine=external:" + engine,
				"--sock=" + d.socket, "--nrfiles=" + fmt.Sprint(files), "--bs=4k",
				"--filename_format=" + tc.name + ".$jobnum.$filenum"}, tc.args...)...)
			if err != nil || strings.Contains(out, "err=") && !strings.Contains(out, "err= 0") {
				t.Fatalf("fio %s: %v\n%s", tc.name, err, lastLines(out, 20))
			}
			conns := d.metric("zonefold_server_connections_total") - before
			list, err := c.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			laid := 0
			for _, e := range list {
				if strings.HasPrefix(e.Name, tc.name+".") && e.Size > 0 {
					laid++
				}
			}
			jobs := 1
			if strings.Contains(strings.Join(tc.args, " "), "--numjobs=2") {
				jobs = 2
			}
			if laid != files*jobs {
				t.Fatalf("%d files laid out, want %d\n%s", laid, files*jobs, lastLines(out, 20))
			}
			t.Logf("%d files laid out in %v connections", laid, conns)
			if conns < 1 || conns > float64(tc.most) {
				t.Fatalf("fio made %v connections to lay out %d files, want at most %d", conns, laid, tc.most)
			}
		})
	}
	d.stop()
}

// TestH39bFioLayoutAheadMixesFiles: the engine lays out a job's files
// that need no data together (zf_lay_out_ahead), each step's requests
// for many files at once, and leaves a file shorter than the range to
// its own layout anew. Among missing files, a shorter one another client
// holds open, and one longer than the range: every file ends at least
// as long as the range, the shorter one is a new file (zeros) while the
// other client keeps the old one's data, and the longer one is left as
// it was.
func TestH39bFioLayoutAheadMixesFiles(t *testing.T) {
	_, engine := fioEnv(t)
	d := newServe(t)
	ctx := context.Background()
	c := dialServe(t, d)
	defer c.Close()
	const files = 100
	short := bytes.Repeat([]byte{0xcd}, 4<<10)
	long := bytes.Repeat([]byte{0xef}, 32<<10)
	held := writeFile(t, c, "mix.0.7", 0, short, true)
	defer c.CloseFile(ctx, held)
	c.CloseFile(ctx, writeFile(t, c, "mix.0.70", 0, short, true))
	c.CloseFile(ctx, writeFile(t, c, "mix.0.40", 0, long, true))
	for _, rw := range []string{"write", "randwrite"} {
		out, err := runFioWatched(t, d, "--name=mix", "--ioengine=external:"+engine, "--sock="+d.socket,
			"--nrfiles="+fmt.Sprint(files), "--filesize=16k", "--bs=4k", "--rw="+rw, "--create_only=1",
			"--filename_format=mix.$jobnum.$filenum")
		if err != nil {
			t.Fatalf("fio: %v\n%s", err, lastLines(out, 20))
		}
	}
	for i := range files {
		name := fmt.Sprintf("mix.0.%d", i)
		got := readWhole(t, c, name)
		switch {
		case i == 40:
			if !bytes.Equal(got, long) {
				t.Fatalf("%s, longer than the range: %d bytes, changed", name, len(got))
			}
		case len(got) != 16<<10 || !bytes.Equal(got, make([]byte, 16<<10)):
			t.Fatalf("%s: %d bytes, all zeros %v; want 16 KiB of zeros", name, len(got),
				bytes.Equal(got, make([]byte, len(got))))
		}
	}
	buf := make([]byte, 8<<10)
	if n, _ := c.ReadAt(ctx, held, buf, 0); !bytes.Equal(buf[:n], short) {
		t.Fatalf("the other client's open file after fio laid its name out: %d bytes, intact %v", n, bytes.Equal(buf[:min(n, len(short))], short[:min(n, len(short))]))
	}
	d.stop()
}
