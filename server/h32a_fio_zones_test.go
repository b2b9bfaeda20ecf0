package server_test

import (
	"context"
	"strings"
	"testing"
)

// TestH32aFioZonemodeZbdZonesTheFile: fio's zonemode=zbd on a regular
// file emulates zones over the file's size. On a kernel file system
// (ioengine=psync) a 16 MiB file with zonesize=4m is four zones: a
// sequential 16 MiB write with verify reads back 16 MiB, and a missing
// file is refused ("file/device size 0 is smaller than zone size").
// Through the engine a job with size= left the file's size unknown (-1),
// from which fio's init_zone_info computed zero zones (its round-up
// overflows): fio then reported 16 MiB written and verified while the
// verify read back 64 KiB, and a new file was left 64 KiB long, every
// write but the first gone.
func TestH32aFioZonemodeZbdZonesTheFile(t *testing.T) {
	_, engine := fioEnv(t)
	d := newServe(t)
	base := []string{"--ioengine=external:" + engine, "--sock=" + d.socket, "--bs=64k", "--size=16m",
		"--zonemode=zbd", "--zonesize=4m"}
	verify := []string{"--verify=crc32c", "--verify_fatal=1", "--do_verify=1", "--verify_state_save=0"}

	t.Run("missing file", func(t *testing.T) {
		out, err := runFioWatched(t, d, append([]string{"--name=zbd-new", "--filename=zbd-new", "--rw=write"},
			append(base, verify...)...)...)
		if err == nil || !strings.Contains(out, "smaller than zone size") {
			t.Errorf("fio zonemode=zbd on a missing file: %v, want fio's refusal as on a kernel file system\n%s", err, out)
		}
		c := dialServe(t, d)
		defer c.Close()
		if st, err := c.Stat(context.Background(), "zbd-new"); err == nil && st.Size != 0 && st.Size != 16<<20 {
			t.Errorf("zbd-new after fio: %d bytes, want none or all 16 MiB fio reported", st.Size)
		}
	})

	// A 16 MiB file, written without zones, then zoned.
	out, err := runFioWatched(t, d, "--name=zbd-lay", "--ioengine=external:"+engine, "--sock="+d.socket,
		"--filename=zbd-old", "--rw=write", "--bs=1m", "--size=16m")
	checkFio(t, "zbd-lay", out, err, false)
	for _, rw := range []string{"write", "randwrite"} {
		t.Run(rw, func(t *testing.T) {
			out, err := runFioWatched(t, d, append([]string{"--name=zbd-" + rw, "--filename=zbd-old", "--rw=" + rw},
				append(base, verify...)...)...)
			checkFio(t, "zbd-"+rw, out, err, false)
			if got := fioSummaryIO(out, "READ"); got != "16.0MiB" {
				t.Fatalf("fio zonemode=zbd %s did not verify the 16 MiB it wrote:\n%s", rw, out)
			}
		})
	}
	c := dialServe(t, d)
	if st, err := c.Stat(context.Background(), "zbd-old"); err != nil || st.Size != 16<<20 {
		t.Errorf("zbd-old: %d bytes, %v; want 16 MiB", st.Size, err)
	}
	c.Close()
	d.stop()
}

// fioSummaryIO is the io= of fio's run status line for dir (READ,
// WRITE): how much the job's group moved that way, "" if none.
func fioSummaryIO(out, dir string) string {
	for _, l := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(l), dir+": bw=")
		if !ok {
			continue
		}
		_, io, ok := strings.Cut(rest, "io=")
		if !ok {
			return ""
		}
		io, _, _ = strings.Cut(io, " ")
		return io
	}
	return ""
}

// TestH32aFioStridedStaysInTheFile: zonemode=strided (zonesize= bytes of
// every zonerange=) wraps to the file's start at its end. On a kernel
// file system a 16 MiB sequential job with zonesize=1m zonerange=4m
// leaves a 16 MiB file. Through the engine the size was unknown (-1),
// nothing wrapped, and fio wrote on past it: a 61 MiB file.
func TestH32aFioStridedStaysInTheFile(t *testing.T) {
	_, engine := fioEnv(t)
	d := newServe(t)
	out, err := runFioWatched(t, d, "--name=strided", "--ioengine=external:"+engine, "--sock="+d.socket,
		"--filename=strided", "--rw=write", "--bs=64k", "--size=16m", "--zonemode=strided",
		"--zonesize=1m", "--zonerange=4m")
	checkFio(t, "strided", out, err, false)
	c := dialServe(t, d)
	if st, err := c.Stat(context.Background(), "strided"); err != nil || st.Size != 16<<20 {
		t.Errorf("strided after fio: %d bytes, %v; want 16 MiB as on a kernel file system", st.Size, err)
	}
	c.Close()
	d.stop()
}
