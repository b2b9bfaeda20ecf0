package server_test

import (
	"context"
	"strings"
	"testing"
)

// TestH39eFioLayoutStopsAtAFailingFile: fio lays a job's files out one at
// a time and stops at the first that fails (extend_file, or the engine's
// prepopulate_file): the files after it are not created. The engine lays
// files that need no data out 64 at a time (zf_lay_out_ahead), and skipped
// a file whose name does not fit the batch (more than 255 bytes, the
// daemon's limit) to go on with the files after it: fio failed at that
// file ("File name too long") having created and grown the files after
// it, which the engine had done one file at a time before.
func TestH39eFioLayoutStopsAtAFailingFile(t *testing.T) {
	_, engine := fioEnv(t)
	d := newServe(t)
	ctx := context.Background()
	c := dialServe(t, d)
	defer c.Close()
	long := strings.Repeat("x", 300)
	names := []string{"before.0", "before.1", long, "after.0", "after.1"}
	out, err := runFioWatched(t, d, "--name=stop", "--ioengine=external:"+engine, "--sock="+d.socket,
		"--create_only=1", "--rw=write", "--filesize=4k", "--bs=4k", "--filename="+strings.Join(names, ":"))
	if err == nil && !strings.Contains(out, "File name too long") {
		t.Fatalf("fio did not fail on a name of %d bytes:\n%s", len(long), lastLines(out, 20))
	}
	if !strings.Contains(out, "File name too long") {
		t.Fatalf("fio failed without saying the name is too long: %v\n%s", err, lastLines(out, 20))
	}
	for _, name := range names[:2] {
		if st, err := c.Stat(ctx, name); err != nil || st.Size != 4096 {
			t.Errorf("%s, before the failing file: %+v, %v; want 4096 bytes", name, st, err)
		}
	}
	for _, name := range names[3:] {
		if st, err := c.Stat(ctx, name); err == nil {
			t.Errorf("%s, after the failing file, exists (%d bytes): fio stops at the first file that fails", name, st.Size)
		}
	}
}
