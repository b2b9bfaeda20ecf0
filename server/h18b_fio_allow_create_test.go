package server_test

import (
	"context"
	"errors"
	"io/fs"
	"testing"
)

// TestH18bFioAllowFileCreateZero: allow_file_create=0 ("if zero, fio
// will not create files it needs, they must exist") fails a kernel job
// whose file is missing ("file creation disallowed by
// allow_file_create=0"). Through the engine the file is created anyway
// (zf_open_file always sends ZF_OPEN_CREATE) and the job exits 0.
func TestH18bFioAllowFileCreateZero(t *testing.T) {
	_, engine := fioEnv(t)
	d := newServe(t)
	out, err := runFioWatched(t, d, "--name=nocreate", "--ioengine=external:"+engine, "--sock="+d.socket,
		"--filename=nocreate", "--rw=write", "--bs=4k", "--size=64k", "--allow_file_create=0")
	c := dialServe(t, d)
	defer c.Close()
	if st, serr := c.Stat(context.Background(), "nocreate"); !errors.Is(serr, fs.ErrNotExist) {
		t.Errorf("allow_file_create=0: the daemon has nocreate (%d bytes); fio exit %v\n%s", st.Size, err, out)
	}
	if err == nil {
		t.Errorf("allow_file_create=0 on a missing file: fio exited 0\n%s", out)
	}
	d.stop()
}
