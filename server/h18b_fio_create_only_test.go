package server_test

import (
	"context"
	"strings"
	"testing"
)

// TestH18bFioCreateOnlyCreatesOrRefuses: fio's create_only=1 runs only
// the setup phase: on a kernel file system (ioengine=psync) it creates
// the job's file laid out to its size (64 KiB here) and exits 0, so that
// a later job can read it. Through the engine fio exits 0 and the daemon
// has no such file: the option is silently a no-op, and the next job
// that reads the file without size= fails ("does not exist"). The engine
// must either create the file as fio's options say or refuse the job
// naming create_only, as it does for the options it cannot serve.
func TestH18bFioCreateOnlyCreatesOrRefuses(t *testing.T) {
	_, engine := fioEnv(t)
	d := newServe(t)
	for _, rw := range []string{"write", "read"} {
		t.Run(rw, func(t *testing.T) {
			name := "created-" + rw
			out, err := runFioWatched(t, d, "--name="+name, "--ioengine=external:"+engine, "--sock="+d.socket,
				"--filename="+name, "--rw="+rw, "--bs=4k", "--size=64k", "--create_only=1")
			if err != nil {
				if !strings.Contains(out, "create_only") {
					t.Fatalf("fio failed without naming create_only: %v\n%s", err, out)
				}
				return // refused by name: fine
			}
			c := dialServe(t, d)
			defer c.Close()
			st, err := c.Stat(context.Background(), name)
			if err != nil || st.Size != 64<<10 {
				t.Fatalf("fio create_only=1 --size=64k exited 0, and the daemon's %s: size %d, %v; want a file of 64 KiB (as fio lays out on a kernel file system) or a refusal naming create_only\n%s",
					name, st.Size, err, out)
			}
		})
	}
	d.stop()
}
