package server_test

import (
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
