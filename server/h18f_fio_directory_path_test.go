package server_test

import (
	"context"
	"strings"
	"testing"
)

// TestH18fFioDirectoryNamesTheSameFile: fio builds a job's file name as
// directory + "/" + filename, so `directory=DIR/` (a trailing slash, as
// job files commonly write it) gives "DIR//f". On every file system fio
// runs on that is the file DIR/f: a later job naming filename=DIR/f
// reads what the first wrote (with ioengine=psync this verify_only job
// passes). The engine passes fio's string to the daemon as the file's
// name, so the daemon holds two files, "DIR//f" with the data and
// "DIR/f" created empty by the second job, whose verification fails
// (fio's err=84, "bad magic header" on every block).
func TestH18fFioDirectoryNamesTheSameFile(t *testing.T) {
	_, engine := fioEnv(t)
	d := newServe(t)
	dir := t.TempDir() // fio lstat()s directory= locally
	common := []string{"--ioengine=external:" + engine, "--sock=" + d.socket, "--rw=write", "--bs=4k", "--size=64k", "--verify=crc32c"}
	out, err := runFioWatched(t, d, append([]string{"--name=w", "--directory=" + dir + "/", "--filename=f", "--do_verify=0"}, common...)...)
	if err != nil {
		t.Fatalf("fio write with directory=%s/: %v\n%s", dir, err, out)
	}
	out, err = runFioWatched(t, d, append([]string{"--name=w", "--filename=" + dir + "/f", "--verify_only=1"}, common...)...)
	c := dialServe(t, d)
	defer c.Close()
	list, lerr := c.List(context.Background())
	var names []string
	for _, e := range list {
		names = append(names, e.Name)
	}
	if err != nil || len(names) != 1 {
		t.Fatalf("fio wrote with directory=%s/ filename=f, then verify_only with filename=%s/f (the same file on a kernel file system, where this passes): %v; the daemon's files: %q (lerr %v)\n%s",
			dir, dir, err, names, lerr, lastLines(out, 4))
	}
	d.stop()
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}
