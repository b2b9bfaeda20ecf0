package server_test

import (
	"context"
	"errors"
	"io/fs"
	"testing"

	"github.com/zonefold/zonefold/server"
)

// TestH18bFioUnlinkWhileAnotherClientHoldsTheFile: fio with unlink=1
// exits 0, but if any client other than fio's jobs (a `zonefold get`
// still copying, a reader, another fio run) has the file open when the
// job ends, the engine's remove (ZF_REMOVE_UNUSED) gets EBUSY, which
// zf_unlink_file turns into success, and nobody ever removes the file:
// after every handle is closed it is still there, holding its space.
// On a kernel file system unlink(2) removes the name at once and the
// space goes with the last close; README says the daemon's file is
// removed "once no job has them open ... the last one to close removes
// it".
func TestH18bFioUnlinkWhileAnotherClientHoldsTheFile(t *testing.T) {
	_, engine := fioEnv(t)
	d := newServe(t)
	ctx := context.Background()
	c := dialServe(t, d)
	defer c.Close()
	h, _, err := c.Open(ctx, "held", server.OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	out, err := runFioWatched(t, d, "--name=held", "--ioengine=external:"+engine, "--sock="+d.socket,
		"--filename=held", "--rw=write", "--bs=64k", "--size=4m", "--unlink=1")
	checkFio(t, "held", out, err, false)
	// The other client is done with it.
	if err := c.CloseFile(ctx, h); err != nil {
		t.Fatal(err)
	}
	if st, err := c.Stat(ctx, "held"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("fio unlink=1 exited 0, every handle is closed, and the daemon still has held (%d bytes, stat err %v): nothing will ever remove it",
			st.Size, err)
	}
	d.stop()
}
