package server_test

import (
	"bytes"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestH33aFioFillDeviceAckedWritesSurviveKill9: fill_device=1 with
// fsync_on_close=1 at iodepth 16 on a small device. The daemon admits a
// job's writes concurrently, each reserving its room and then checking
// the room with every reservation counted: near full, a write may be
// refused (ENOSPC) while writes fio issued after it, at higher offsets,
// are accepted (1 MiB writes: the first refused at 2-7 MiB, 8-13 writes
// above it accepted, 15 MiB accepted in all, as many as sequential 64
// KiB writes leave). That is room other refused writes gave back, not
// room promised twice: every write fio saw complete must be on the
// device once fsync_on_close has returned, through kill -9 of the
// daemon, and fio must have been told of each failure.
func TestH33aFioFillDeviceAckedWritesSurviveKill9(t *testing.T) {
	_, engine := fioEnv(t)
	dir := t.TempDir()
	d := startServe(t, fmt.Sprintf("emu:%s?zone_size=4M&zones=8", filepath.Join(dir, "dev")), filepath.Join(dir, "zf.sock"))
	const bs = 1 << 20
	out, err := runFioWatched(t, d, "--name=fill", "--ioengine=external:"+engine, "--sock="+d.socket,
		"--filename=fill", "--rw=write", "--bs=1m", "--iodepth=16", "--size=1g",
		"--fill_device=1", "--fsync_on_close=1")
	if err != nil {
		t.Fatalf("fio fill_device: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`issued rwts: total=0,(\d+),`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no issued count in fio's output:\n%s", out)
	}
	issued, _ := strconv.Atoi(m[1])
	failed := map[int64]bool{}
	for _, f := range regexp.MustCompile(`No space left on device: write offset=(\d+)`).FindAllStringSubmatch(out, -1) {
		off, _ := strconv.ParseInt(f[1], 10, 64)
		failed[off] = true
	}
	if len(failed) == 0 || len(failed) >= issued {
		t.Fatalf("fio issued %d writes, %d failed with ENOSPC; want some of each\n%s", issued, len(failed), out)
	}
	d.kill9()
	d = startServe(t, d.device, d.socket)
	c := dialServe(t, d)
	defer c.Close()
	got := readWhole(t, c, "fill")
	for i := 0; i < issued; i++ {
		off := int64(i) * bs
		if failed[off] {
			continue
		}
		if off+bs > int64(len(got)) || bytes.Count(got[off:off+bs], []byte{0}) == bs {
			t.Fatalf("the write at %d completed (fio saw no error; %d of %d failed), and fsync_on_close returned, yet after kill -9 it is not there (file of %d bytes)\n%s",
				off, len(failed), issued, len(got), out)
		}
	}
	d.stop()
}

// TestH33aFioFillDeviceReadLaysOutToFull: fill_device=1 in a job that
// reads lays the file out with data until the device is full (fio's
// extend_file stops at ENOSPC then, and sizes the job to the file), and
// the job reads it all. The engine laid nothing out (the job's size is
// unknown to fio then): the job read nothing and left an empty file.
func TestH33aFioFillDeviceReadLaysOutToFull(t *testing.T) {
	_, engine := fioEnv(t)
	dir := t.TempDir()
	d := startServe(t, fmt.Sprintf("emu:%s?zone_size=4M&zones=8", filepath.Join(dir, "dev")), filepath.Join(dir, "zf.sock"))
	c := dialServe(t, d)
	defer c.Close()
	// Twice: the second run lays the file out anew, as fio does (on a
	// full device, over the first run's file).
	for run := 1; run <= 2; run++ {
		out, err := runFioWatched(t, d, "--name=fillread", "--ioengine=external:"+engine, "--sock="+d.socket,
			"--filename=fillread", "--rw=read", "--bs=64k", "--fill_device=1")
		if err != nil || !strings.Contains(out, "err= 0") {
			t.Fatalf("run %d: fio fill_device=1 --rw=read: %v\n%s", run, err, out)
		}
		got := readWhole(t, c, "fillread")
		m := regexp.MustCompile(`READ: .* io=(\d+(\.\d+)?)MiB`).FindStringSubmatch(out)
		if len(got) < 8<<20 || m == nil {
			t.Fatalf("run %d: fill_device=1 --rw=read on a 32 MiB device: a file of %d bytes, read %v; want it laid out until the device was full, and read\n%s", run, len(got), m, out)
		}
		if mib, _ := strconv.ParseFloat(m[1], 64); int64(mib*(1<<20)) != int64(len(got)) {
			t.Fatalf("run %d: fill_device=1 --rw=read read %s MiB of a file of %d bytes; want all of it\n%s", run, m[1], len(got), out)
		}
	}
	d.stop()
}
