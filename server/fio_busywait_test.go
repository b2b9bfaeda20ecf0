package server_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The fio engine spins and yields the CPU while it waits for replies only
// where its job has a CPU to itself: fewer jobs in its group (those fio
// runs at once, up to a stonewall) than the CPUs it may run on. A job
// that waits busily stays runnable and takes CPU from the daemon and the
// other jobs: 16 jobs on 2 CPUs spent 43% of all CPU time in sched_yield,
// and went twice as fast sleeping at once. Checked through the engine's
// ZONEFOLD_FIO_STATS line per job (the decision, what it came from, and
// how the waits ended), not through timing.
func TestFioBusyWaitsOnlyWithACPUToSpare(t *testing.T) {
	fio, engine := fioEnv(t)
	d := newServe(t)
	cpus := runtime.NumCPU()
	dir := t.TempDir()
	// Group 0: cpus jobs, none of which may wait busily. Group 1, after
	// a stonewall: one job, which may where there are 2 CPUs or more.
	job := fmt.Sprintf(`[global]
ioengine=external:%s
sock=%s
rw=randwrite
bs=8k
iodepth=4
size=2m
fsync=8
filename_format=bw.$jobname.$jobnum

[crowd]
numjobs=%d

[alone]
stonewall
numjobs=1
`, engine, d.socket, cpus)
	jobPath := filepath.Join(dir, "busy.fio")
	if err := os.WriteFile(jobPath, []byte(job), 0o644); err != nil {
		t.Fatal(err)
	}
	stats := filepath.Join(dir, "stats")
	cmd := exec.Command(fio, jobPath)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "ZONEFOLD_FIO_STATS="+stats)
	out, err := cmd.CombinedOutput()
	checkFio(t, "busy.fio", string(out), err, false)
	b, err := os.ReadFile(stats)
	if err != nil {
		t.Fatalf("no ZONEFOLD_FIO_STATS file: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != cpus+1 {
		t.Fatalf("%d stats lines for %d jobs:\n%s", len(lines), cpus+1, b)
	}
	seen := map[string]int{}
	for _, l := range lines {
		var name string
		var busy, group, ncpu int
		var spun, yielded, slept uint64
		if _, err := fmt.Sscanf(l, "job=%s busy_waits=%d group_jobs=%d cpus=%d spun=%d yielded=%d slept=%d",
			&name, &busy, &group, &ncpu, &spun, &yielded, &slept); err != nil {
			t.Fatalf("stats line %q: %v", l, err)
		}
		seen[name]++
		if ncpu != cpus {
			t.Errorf("%s: the engine counted %d CPUs, the test %d", l, ncpu, cpus)
		}
		switch name {
		case "crowd":
			// Whether it waited at all is timing (a daemon that
			// answers before the job looks leaves it nothing to
			// wait for: slept=0 was seen); that it never spun or
			// yielded is not.
			if group != cpus || busy != 0 || spun != 0 || yielded != 0 {
				t.Errorf("a job of a group as large as the CPUs: %s (want group_jobs=%d, no busy waits, no spins or yields)", l, cpus)
			}
		case "alone":
			want := 0
			if cpus >= 2 {
				want = 1
			}
			if group != 1 || busy != want {
				t.Errorf("the job alone after the stonewall: %s (want group_jobs=1 busy_waits=%d)", l, want)
			}
		default:
			t.Errorf("stats line of an unknown job: %s", l)
		}
	}
	if seen["crowd"] != cpus || seen["alone"] != 1 {
		t.Errorf("lines per job: %v", seen)
	}
}
