package server_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"testing"
)

// TestH18bFioReadonlyChangesNoFile: fio --readonly is fio's safety
// switch ("preventing writes"). On a kernel file system (ioengine=psync)
// a read job with --readonly and --size=64k neither creates a missing
// file nor extends a shorter one ("refusing extend of file due to
// read-only"). Through the engine, zf_open_file opens with
// ZF_OPEN_CREATE and lays the file out with a grow-only truncate for
// every job that reads, whatever --readonly says: the missing file is
// created (64 KiB) and the user's 6-byte file is grown to 64 KiB.
func TestH18bFioReadonlyChangesNoFile(t *testing.T) {
	_, engine := fioEnv(t)
	d := newServe(t)
	ctx := context.Background()
	c := dialServe(t, d)
	defer c.Close()
	orig := []byte("small\n")
	h := writeFile(t, c, "ro-existing", 0, orig, true)
	c.CloseFile(ctx, h)
	for _, name := range []string{"ro-existing", "ro-missing"} {
		out, err := runFioWatched(t, d, "--readonly", "--name="+name, "--ioengine=external:"+engine, "--sock="+d.socket,
			"--filename="+name, "--rw=read", "--bs=4k", "--size=64k")
		t.Logf("fio --readonly on %s: %v", name, err)
		_ = out
	}
	if got := readWhole(t, c, "ro-existing"); !bytes.Equal(got, orig) {
		t.Errorf("fio --readonly changed ro-existing: %d bytes, was %d", len(got), len(orig))
	}
	if st, err := c.Stat(ctx, "ro-missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("fio --readonly created ro-missing (%d bytes, stat err %v)", st.Size, err)
	}
	d.stop()
}
