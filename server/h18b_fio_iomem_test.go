package server_test

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestH18bFioIomemIsRefusedNotACrash: a job file that says where fio's
// buffers live (mem= / iomem=, common in job files: iomem=malloc, shm,
// mmap) makes fio skip the engine's iomem_alloc ("option 'mem/iomem'
// conflicts with specified IO engine"); the job then runs with no
// buffers and dies with SIGSEGV in get_io_u, and fio's parent aborts
// ("double free or corruption", exit 134). The engine owns the buffers
// (they must live in the daemon's region), so like offload or trim it
// must refuse such a job at init, naming the option, with fio exiting
// 1 and no crash.
func TestH18bFioIomemIsRefusedNotACrash(t *testing.T) {
	_, engine := fioEnv(t)
	d := newServe(t)
	for _, mem := range []string{"malloc", "shm", "mmap"} {
		t.Run(mem, func(t *testing.T) {
			out, err := runFioWatched(t, d, "--name=iomem-"+mem, "--ioengine=external:"+engine, "--sock="+d.socket,
				"--filename=iomem-"+mem, "--rw=write", "--bs=4k", "--size=1m", "--iomem="+mem)
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Errorf("fio exit: %v, want exit status 1 (a refused job)", err)
			}
			for _, bad := range []string{"signal=11", "double free", "corruption"} {
				if strings.Contains(out, bad) {
					t.Errorf("fio crashed (%q) instead of refusing iomem=%s:\n%s", bad, mem, out)
					break
				}
			}
			named := false
			for _, l := range strings.Split(out, "\n") {
				named = named || strings.HasPrefix(l, "zonefold: ") && strings.Contains(l, "mem")
			}
			if !named {
				t.Errorf("no refusal from the engine naming mem/iomem:\n%s", out)
			}
		})
	}
	runFio(t, d, "verify-seq128k.fio")
	d.stop()
}
