package server_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/zonefold/zonefold/server"
)

// TestH41cRefusedFioJobLeavesTheFileAlone: a job the daemon cannot serve
// is refused before it touches the job's files. fio sets the files up
// (in its parent) before the engine's init runs, and the engine refused
// these jobs only in init: by then the layout had replaced an existing
// file shorter than the job's range with a new one (emptied, or laid out
// with fio's data), so a job that was refused, and wrote not one block,
// had destroyed the file a user pointed it at (found driving fio by
// hand: a 1 MiB file put with zonefold put, then --size=2m with
// rw=trimwrite, io_submit_mode=offload, iodepth=5000 or mem=malloc each
// left 2 MiB of something else). A block above the daemon's MaxIO was
// worse: the layout's write failed with a bare "Argument list too long"
// and left the name with an empty file.
func TestH41cRefusedFioJobLeavesTheFileAlone(t *testing.T) {
	_, engine := fioEnv(t)
	d := newServe(t)
	c := dialServe(t, d)
	defer c.Close()
	ctx := context.Background()
	old := randomBytes(t, 1<<20)
	cases := []struct {
		name string
		args []string
		want string // what the engine's refusal names
	}{
		{"trimwrite", []string{"--rw=trimwrite", "--bs=4k"}, "trim"},
		{"offload", []string{"--rw=write", "--bs=4k", "--io_submit_mode=offload"}, "io_submit_mode=offload"},
		{"iodepth", []string{"--rw=write", "--bs=4k", "--iodepth=5000"}, "iodepth 5000 is above"},
		{"mem", []string{"--rw=randrw", "--bs=4k", "--mem=malloc"}, "mem="},
		{"sync-file-range", []string{"--rw=write", "--bs=4k", "--sync_file_range=write:4"}, "sync_file_range"},
		{"trim-percentage", []string{"--rw=randwrite", "--bs=4k", "--verify=md5", "--verify_state_save=0",
			"--trim_percentage=50", "--trim_backlog=8"}, "trim_percentage"},
		{"region", []string{"--rw=randrw", "--bs=4m", "--iodepth=256", "--size=8m"}, "shared memory"},
		{"bs-above-maxio", []string{"--rw=randrw", "--bs=17m", "--size=34m"}, "16 MiB"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := writeFile(t, c, tc.name, 0, old, true)
			if err := c.CloseFile(ctx, h); err != nil {
				t.Fatal(err)
			}
			out, err := runFioWatched(t, d, append([]string{"--name=" + tc.name, "--ioengine=external:" + engine,
				"--sock=" + d.socket, "--filename=" + tc.name, "--size=2m"}, tc.args...)...)
			if err == nil {
				t.Fatalf("fio ran a job it cannot serve:\n%s", out)
			}
			var msg string // the engine's own lines
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "zonefold: ") {
					msg += l + "\n"
				}
			}
			if !strings.Contains(msg, tc.want) {
				t.Errorf("no refusal from the engine naming %q:\n%s", tc.want, out)
			}
			if got := readWhole(t, c, tc.name); !bytes.Equal(got, old) {
				t.Errorf("the refused job changed %s: %d bytes (equal to the old: %v), want its 1 MiB as it was:\n%s",
					tc.name, len(got), bytes.Equal(got, old), out)
			}
		})
	}
	d.stop()
}

// TestH41cFioRefusesATemporarysName: a job whose file name (as the
// engine cleans it) starts with the prefix reserved for temporaries
// (server.TempPrefix) is refused, naming the prefix, and creates
// nothing. The daemon removes every such file at its next start, so
// before this the job ran, its fsyncs succeeded, and its file was gone
// after a restart (found driving fio by hand with
// --filename=.zonefold-tmp.abc: listed after the job, gone after the
// daemon restarted). zonefold put refuses such a NAME the same way.
func TestH41cFioRefusesATemporarysName(t *testing.T) {
	_, engine := fioEnv(t)
	d := newServe(t)
	c := dialServe(t, d)
	defer c.Close()
	for _, name := range []string{server.TempPrefix + "mine", "./" + server.TempPrefix + "x"} {
		out, err := runFioWatched(t, d, "--name=tmp", "--ioengine=external:"+engine, "--sock="+d.socket,
			"--filename="+name, "--rw=write", "--bs=4k", "--size=64k", "--end_fsync=1")
		if err == nil {
			t.Fatalf("fio ran a job on %q, a temporary's name the daemon removes at its next start:\n%s", name, out)
		}
		if !strings.Contains(out, "zonefold: ") || !strings.Contains(out, server.TempPrefix) ||
			!strings.Contains(out, "reserved") {
			t.Errorf("no refusal from the engine naming the reserved prefix for %q:\n%s", name, out)
		}
	}
	list, err := c.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list {
		if strings.HasPrefix(e.Name, server.TempPrefix) {
			t.Errorf("the refused job left %q", e.Name)
		}
	}
	d.stop()
}
