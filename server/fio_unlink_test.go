package server_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/zonefold/zonefold/server"
)

// TestFioUnlinkRemovesTheDaemonsFile: fio's unlink=1 (and
// unlink_each_loop=1) removes the job's files when it is done with them;
// through the engine that is the daemon's file, and never a local file of
// the same name in fio's working directory. Before the engine had an
// unlink_file hook, fio unlink(2)ed the name locally: the daemon's file
// stayed, and a local file that happened to share its name was deleted.
func TestFioUnlinkRemovesTheDaemonsFile(t *testing.T) {
	fio, engine := fioEnv(t)
	d := newServe(t)
	for _, tc := range []struct {
		name string
		opts []string
	}{
		{"unlinked", []string{"--unlink=1"}},
		{"unlinked-each-loop", []string{"--unlink_each_loop=1", "--unlink=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			local := filepath.Join(dir, tc.name)
			if err := os.WriteFile(local, []byte("not the daemon's"), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(fio, append([]string{"--name=" + tc.name, "--ioengine=external:" + engine, "--sock=" + d.socket,
				"--filename=" + tc.name, "--rw=write", "--bs=64k", "--size=1m", "--loops=2"}, tc.opts...)...)
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			checkFio(t, tc.name, string(out), err, false)
			if b, err := os.ReadFile(local); err != nil || !bytes.Equal(b, []byte("not the daemon's")) {
				t.Fatalf("the local file %s after fio %v: %q, %v: fio removed it instead of the daemon's", tc.name, tc.opts, b, err)
			}
			ctx := context.Background()
			c, err := server.Dial(ctx, d.socket, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if st, err := c.Stat(ctx, tc.name); err == nil {
				t.Fatalf("the daemon still has %s (%d bytes) after fio %v", tc.name, st.Size, tc.opts)
			}
		})
	}
	d.stop()
}
