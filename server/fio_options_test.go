package server_test

import (
	"strings"
	"testing"
)

// A job whose options the daemon can never serve is refused when it
// starts, with a message naming the option, rather than failing its
// first I/O with a bare errno that names nothing ("Argument list too
// long" for a block above the protocol's MaxIO, "Operation not
// supported" for a trim or sync_file_range, an assertion and SIGABRT
// for trim_percentage). pre_read=1 was refused here too until the
// engine pre-read through the daemon (TestH34dFioPreRead). The daemon then still serves the next job.
func TestFioRefusesUnservableOptionsByName(t *testing.T) {
	_, engine := fioEnv(t)
	d := newServe(t)
	// Each case: the job's name, its options, what the engine's refusal
	// names.
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"bs-above-maxio", []string{"--rw=write", "--bs=32m", "--size=64m"}, []string{"bs", "16 MiB"}},
		{"bssplit-above-maxio", []string{"--rw=randwrite", "--bssplit=4k/50:32m/50", "--size=64m"}, []string{"bs", "16 MiB"}},
		{"trim", []string{"--rw=randtrim", "--bs=4k", "--size=1m"}, []string{"trim"}},
		{"trimwrite", []string{"--rw=trimwrite", "--bs=4k", "--size=1m"}, []string{"trim"}},
		{"sync-file-range", []string{"--rw=write", "--bs=4k", "--size=1m", "--sync_file_range=write:4"}, []string{"sync_file_range"}},
		// Verify's trims: fio asserted in fio_ro_check from the engine's
		// queue and died of SIGABRT (as it does with its own engines).
		{"trim-percentage", []string{"--rw=randwrite", "--bs=4k", "--size=1m", "--verify=md5",
			"--verify_state_save=0", "--trim_percentage=50", "--trim_backlog=8"}, []string{"trim_percentage"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// runFioWatched fails the test if fio hangs.
			out, err := runFioWatched(t, d, append([]string{"--name=" + tc.name,
				"--ioengine=external:" + engine, "--sock=" + d.socket, "--filename=" + tc.name}, tc.args...)...)
			if err == nil {
				t.Fatalf("fio ran a job it cannot serve:\n%s", out)
			}
			// Refused in fio's setup of the job's files (before any
			// layout: TestH41cRefusedFioJobLeavesTheFileAlone), or in
			// the job's init (create_serialize=0 runs init first).
			if !strings.Contains(out, "init failed") && !strings.Contains(out, "fio: pid=0, err=22/") {
				t.Errorf("not refused at the job's start:\n%s", out)
			}
			var msg string // the engine's own lines, not fio's job header
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "zonefold: ") {
					msg += l + "\n"
				}
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("no refusal from the engine naming %q:\n%s", w, out)
				}
			}
		})
	}
	runFio(t, d, "verify-seq128k.fio")
}
