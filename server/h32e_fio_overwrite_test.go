package server_test

import (
	"bytes"
	"context"
	"testing"
)

// TestH32eFioOverwriteLaysOutTheFile: overwrite=1 asks fio to lay the
// file out with data before a write job runs, so that the job's writes
// are overwrites of written blocks (on a kernel file system fio's
// extend_file writes the file to the end of the job's range first). The
// engine ignored it: the job below (write 1 MiB of a 4 MiB range) left
// a 1 MiB file, and the blocks it wrote replaced nothing. Honoured, the
// file is 4 MiB and the 3 MiB the job did not write hold fio's layout
// data, not zeros.
func TestH32eFioOverwriteLaysOutTheFile(t *testing.T) {
	_, engine := fioEnv(t)
	d := newServe(t)
	out, err := runFioWatched(t, d, "--name=ow", "--ioengine=external:"+engine, "--sock="+d.socket,
		"--filename=ow", "--rw=write", "--bs=64k", "--size=4m", "--io_size=1m", "--overwrite=1")
	if err != nil {
		t.Fatalf("fio overwrite=1: %v\n%s", err, out)
	}
	ctx := context.Background()
	c := dialServe(t, d)
	defer c.Close()
	h, size, err := c.Open(ctx, "ow", 0)
	if err != nil {
		t.Fatal(err)
	}
	if size != 4<<20 {
		t.Fatalf("fio overwrite=1 --size=4m --io_size=1m left a file of %d bytes; want 4 MiB, laid out before the job as fio does on a kernel file system\n%s", size, out)
	}
	buf := make([]byte, 3<<20)
	if _, err := c.ReadAt(ctx, h, buf, 1<<20); err != nil {
		t.Fatal(err)
	}
	if bytes.Count(buf, []byte{0}) == len(buf) {
		t.Fatalf("fio overwrite=1: the 3 MiB the job did not write are zeros (grown, not laid out with data)\n%s", out)
	}
	d.stop()
}
