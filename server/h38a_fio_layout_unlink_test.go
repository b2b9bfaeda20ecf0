package server_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
)

// TestH38aFioLayoutKeepsAnOpenFilesData: fio lays a file shorter than
// its job's range out anew (extend_file's "layout unlink": a job that
// writes without overwrite=1, or a job that reads, or writes with
// overwrite=1, whose layout then writes the file with fio's data). On a
// kernel file system that unlinks the name: a process that has the old
// file open keeps reading and writing it, its data intact, while the
// name gets fio's new file. The engine cut the daemon's file to 0 in
// place (or wrote its layout over it), so another client's acknowledged
// writes went from under its open handle. Two fio processes on one file
// (`--rw=write --size=8m --rate=4m --verify=crc32c --verify_backlog=8`,
// and a second with `--offset=8m --size=8m` started a second later):
// on a kernel file system (libaio) and with the fix, the first's
// verify fails only at 8355840, the backlog it verifies after it
// reopens the name (fio's own doing); before the fix it failed in the
// middle, at blocks it had written and read back through its open file
// ("bad magic header 0" at 3604480). Here the other process is a client
// that holds the file open, deterministically.
func TestH38aFioLayoutKeepsAnOpenFilesData(t *testing.T) {
	_, engine := fioEnv(t)
	d := newServe(t)
	ctx := context.Background()
	c := dialServe(t, d)
	defer c.Close()
	held := bytes.Repeat([]byte("held by another client "), 1<<20/23+1)[:1<<20]
	cases := []struct {
		name string
		args []string
		// zeros: the name's first MiB after the job is zeros (the write
		// job's new file, grown), else fio's layout data.
		zeros bool
	}{
		{"write", []string{"--rw=write", "--offset=1m", "--size=1m"}, true},
		{"read", []string{"--rw=read", "--size=2m"}, false},
		{"overwrite", []string{"--rw=randwrite", "--overwrite=1", "--size=2m"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := "held-" + tc.name
			h := writeFile(t, c, name, 0, held, false)
			defer c.CloseFile(ctx, h)
			out, err := runFioWatched(t, d, append([]string{"--name=" + tc.name, "--ioengine=external:" + engine,
				"--sock=" + d.socket, "--filename=" + name, "--bs=64k"}, tc.args...)...)
			checkFio(t, tc.name, out, err, false)
			got := make([]byte, 2<<20)
			n, err := c.ReadAt(ctx, h, got, 0)
			if err != nil && !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			if n != len(held) || !bytes.Equal(got[:n], held) {
				t.Fatalf("the other client's open file after fio laid its name out: %d bytes (want %d), intact %v: "+
					"fio's layout cut or overwrote a file another client has open\n%s",
					n, len(held), n >= len(held) && bytes.Equal(got[:len(held)], held), lastLines(out, 12))
			}
			// The name is fio's new file, as on a kernel file system.
			now := readWhole(t, c, name)
			if len(now) != 2<<20 {
				t.Fatalf("%s is %d bytes after the job, want %d", name, len(now), 2<<20)
			}
			if bytes.Contains(now, held[:64]) {
				t.Fatalf("%s still holds the old file's data: not laid out anew", name)
			}
			if isZero := bytes.Equal(now[:1<<20], make([]byte, 1<<20)); isZero != tc.zeros {
				t.Fatalf("%s: first MiB all zeros %v, want %v", name, isZero, tc.zeros)
			}
		})
	}
	d.stop()
}
