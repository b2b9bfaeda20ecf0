package server_test

// fio jobs of shapes the seed job files do not cover, each run under the
// watchdog against one daemon: several jobs on one file, mixed reads
// and writes with unaligned sizes and an fsync after every write, queue
// depths past 512, repeated loops with periodic fdatasync, and an
// operation the engine does not carry (trim). Every job that writes
// verifies what it wrote; the daemon must then still serve and stop
// cleanly with a checkpoint.

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

func TestFioJobShapes(t *testing.T) {
	fioEnv(t)
	d := newServe(t)
	verify := []string{"--verify=crc32c", "--verify_fatal=1", "--verify_state_save=0", "--do_verify=1"}
	jobs := []struct {
		name string
		args []string
	}{
		// Four jobs, four connections, one file: each its own quarter.
		{"shared-file", []string{"--filename=shared", "--numjobs=4", "--size=4m", "--offset_increment=4m",
			"--rw=randwrite", "--bs=4k", "--iodepth=128", "--group_reporting=1"}},
		// An fsync after every write, unaligned sizes from 1k to 37k,
		// reads mixed in, 256 deep.
		{"randrw-unaligned-fsync1", []string{"--filename=mixed", "--size=4m", "--rw=randrw", "--bsrange=1k-37k",
			"--bs_unaligned=1", "--fsync=1", "--iodepth=256", "--iodepth_batch_submit=64"}},
		// Deeper than the seed jobs' 511, submitted in large batches and
		// reaped in halves.
		{"qd1024", []string{"--filename=deep", "--size=16m", "--rw=randwrite", "--bs=4k", "--iodepth=1024",
			"--iodepth_batch_submit=512", "--iodepth_batch_complete_min=256"}},
		// The same blocks three times, fdatasync every 7 writes.
		{"loops-fdatasync", []string{"--filename=looped", "--size=2m", "--rw=randwrite", "--bs=8k", "--loops=3",
			"--fdatasync=7", "--iodepth=16"}},
		// Large sequential writes, 64 deep: 64 MiB, a cache's worth.
		{"seq-1m-qd64", []string{"--filename=big", "--size=64m", "--rw=write", "--bs=1m", "--iodepth=64"}},
	}
	for _, j := range jobs {
		ok := t.Run(j.name, func(t *testing.T) {
			_, engine := fioEnv(t)
			args := append([]string{"--name=" + j.name, "--ioengine=external:" + engine, "--sock=" + d.socket}, j.args...)
			out, err := runFioWatched(t, d, append(args, verify...)...)
			checkFio(t, j.name, out, err, false)
			if !strings.Contains(out, "READ: bw=") {
				t.Fatalf("fio %s verified nothing:\n%s", j.name, out)
			}
		})
		if !ok {
			return
		}
	}
	t.Run("trim-refused", func(t *testing.T) {
		// The engine does not carry trims: fio is told so at init,
		// naming the option (each trim used to fail with a bare
		// "Operation not supported"), and nothing hangs or crashes.
		_, engine := fioEnv(t)
		out, err := runFioWatched(t, d, "--name=trim", "--ioengine=external:"+engine, "--sock="+d.socket,
			"--filename=big", "--rw=randtrim", "--bs=64k", "--size=4m", "--iodepth=8")
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() <= 0 {
			t.Fatalf("fio trims: %v, want a plain failure exit\n%s", err, out)
		}
		if !strings.Contains(out, "zonefold: rw=randtrim is not supported") {
			t.Fatalf("fio trims are not refused naming rw=randtrim:\n%s", out)
		}
		for _, bad := range []string{"double free", "signal", "SIGSEGV", "core dumped"} {
			if strings.Contains(out, bad) {
				t.Fatalf("fio trims: %q in its output:\n%s", bad, out)
			}
		}
	})
	t.Run("offload-refused", func(t *testing.T) {
		// io_submit_mode=offload submits from fio's worker threads,
		// each with a connection of its own that holds none of the
		// job's buffers: writes failed with EFAULT ("Bad address").
		// The engine refuses the mode at init, saying why.
		_, engine := fioEnv(t)
		out, err := runFioWatched(t, d, "--name=offload", "--ioengine=external:"+engine, "--sock="+d.socket,
			"--filename=offload", "--rw=randwrite", "--bs=4k", "--size=1m", "--iodepth=4", "--io_submit_mode=offload")
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() <= 0 {
			t.Fatalf("fio io_submit_mode=offload: %v, want a plain failure exit\n%s", err, out)
		}
		if !strings.Contains(out, "io_submit_mode=offload is not supported") {
			t.Fatalf("fio io_submit_mode=offload does not fail with the engine's reason:\n%s", out)
		}
		if strings.Contains(out, "Bad address") {
			t.Fatalf("fio io_submit_mode=offload reached the daemon with foreign buffers:\n%s", out)
		}
	})
	// The daemon still serves, and every file still verifies.
	_, engine := fioEnv(t)
	out, err := runFioWatched(t, d, "--name=again", "--ioengine=external:"+engine, "--sock="+d.socket,
		"--filename=deep", "--size=16m", "--rw=randwrite", "--bs=4k", "--iodepth=1024", "--verify_only=1",
		"--verify=crc32c", "--verify_fatal=1", "--verify_state_save=0")
	checkFio(t, "again", out, err, false)
	if !strings.Contains(out, "READ: bw=") {
		t.Fatalf("fio verify_only read nothing:\n%s", out)
	}
	d.stop()
}
