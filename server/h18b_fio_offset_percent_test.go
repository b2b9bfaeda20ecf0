package server_test

import (
	"context"
	"testing"
)

// TestH18bFioPercentOffset: offset=50% (and offset_increment=25%) is a
// share of the file's size. On a kernel file system (ioengine=psync) a
// job with --size=1m (or --filesize=1m) and --offset=50% exits 0 and
// leaves a 1 MiB file (1.25 MiB with the increment). Through the engine, zf_setup leaves the size of a
// sized job unknown (-1, "as fio's nfs engine does"), so fio takes 50%
// of 2^64-1: it writes at offset 184467440737095680 and fails with
// EFBIG ("File too large"), leaving an empty file; with filesize= fio
// refuses the job ("you need to specify valid offset=").
func TestH18bFioPercentOffset(t *testing.T) {
	_, engine := fioEnv(t)
	d := newServe(t)
	for _, tc := range []struct {
		name string
		args []string
		want int64 // the file's size after the same job on a kernel file system
	}{
		{"size", []string{"--size=1m", "--offset=50%"}, 1 << 20},
		{"filesize", []string{"--filesize=1m", "--offset=50%"}, 1 << 20},
		{"increment", []string{"--size=1m", "--offset_increment=25%", "--numjobs=2"}, 1<<20 + 256<<10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "pct-" + tc.name
			out, err := runFioWatched(t, d, append([]string{"--name=" + name, "--ioengine=external:" + engine, "--sock=" + d.socket,
				"--filename=" + name, "--rw=write", "--bs=4k"}, tc.args...)...)
			if err != nil {
				t.Fatalf("fio %v: %v (exits 0 on a kernel file system)\n%s", tc.args, err, out)
			}
			c := dialServe(t, d)
			defer c.Close()
			st, err := c.Stat(context.Background(), name)
			if err != nil || st.Size != tc.want {
				t.Fatalf("%s after fio %v: %d bytes, %v; want %d as on a kernel file system", name, tc.args, st.Size, err, tc.want)
			}
		})
	}
	d.stop()
}
