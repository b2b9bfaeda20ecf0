package server_test

// h29b: the daemon on real zoned devices (the VM's null_blk zoned and
// QEMU ZNS NVMe, ZONEFOLD_TEST_DEVICES): kill -9 cycles under fsyncing
// clients and GC, removes against cold reads, fio deep and wide against
// zone limits, and a full device emptied and written again. After each
// probe the kernel log must hold no I/O error the daemon caused.
//
// Run in the VM (see testdata/vm/h29b.sh), e.g.
//   VMTEST_PKG=./server VMTEST_RUN='^TestH29bRealDevices$' testdata/vm/vmtest.sh
// ZONEFOLD_H29B_PROBES=kill9,rmread,fio,full picks probes, and
// ZONEFOLD_H29B_ROUNDS scales the rounds of each.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zonefold/zonefold/server"
)

// h29bZones is how many zones of the real device the probes format: two
// metadata zones and ten data zones keep the device small enough for GC
// and ENOSPC under emulation.
const h29bZones = 12

func h29bRounds(def int) int {
	if n, err := strconv.Atoi(os.Getenv("ZONEFOLD_H29B_ROUNDS")); err == nil && n > 0 {
		return def * n
	}
	return def
}

func h29bProbe(name string) bool {
	p := os.Getenv("ZONEFOLD_H29B_PROBES")
	return p == "" || strings.Contains(","+p+",", ","+name+",")
}

// h29bFormat formats the first zones of dev afresh.
func h29bFormat(t *testing.T, dev string, zones int) {
	t.Helper()
	b, err := execTestMain("zonefold", "format", dev, "--force", "--zones", strconv.Itoa(zones)).CombinedOutput()
	if err != nil {
		t.Fatalf("format %s: %v\n%s", dev, err, b)
	}
	t.Logf("%s", bytes.TrimSpace(b))
}

// h29bKmsg is the kernel log's lines that a zoned device's error leaves
// (I/O errors, NVMe status, zone resource limits) since the last call.
var h29bKmsgSeen int

var h29bKmsgBad = regexp.MustCompile(`(?i)i/o error|blk_update_request|critical|nvme.*(status|error)|zone.*(invalid|full|resource|exceeded)|buffer i/o|hung_task|blocked for more`)

func h29bKmsg(t *testing.T, when string) {
	t.Helper()
	out, err := exec.Command("dmesg").CombinedOutput()
	if err != nil {
		t.Logf("dmesg: %v", err)
		return
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if h29bKmsgSeen > len(lines) {
		h29bKmsgSeen = 0
	}
	var bad []string
	for _, l := range lines[h29bKmsgSeen:] {
		if h29bKmsgBad.MatchString(l) {
			bad = append(bad, l)
		}
	}
	t.Logf("kernel log %s: %d new lines, %d of them errors", when, len(lines)-h29bKmsgSeen, len(bad))
	if n := len(lines) - h29bKmsgSeen; n > 0 && n <= 20 {
		t.Logf("%s", strings.Join(lines[h29bKmsgSeen:], "\n"))
	}
	h29bKmsgSeen = len(lines)
	if len(bad) > 0 {
		t.Errorf("kernel log %s:\n%s", when, strings.Join(bad, "\n"))
	}
}

// TestH29bRealDevices runs the probes on each device of
// ZONEFOLD_TEST_DEVICES.
func TestH29bRealDevices(t *testing.T) {
	list := os.Getenv("ZONEFOLD_TEST_DEVICES")
	if list == "" {
		t.Skip("ZONEFOLD_TEST_DEVICES is not set (the VM sets it)")
	}
	// The daemon's metrics listen on 127.0.0.1: the guest's loopback
	// starts down.
	if b, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Logf("ip link set lo up: %v %s", err, b)
	}
	h29bKmsg(t, "before the probes")
	for _, dev := range strings.Split(list, ",") {
		t.Run(strings.TrimPrefix(dev, "/dev/"), func(t *testing.T) {
			if h29bProbe("kill9") {
				t.Run("kill9", func(t *testing.T) { h29bKill9(t, dev) })
				h29bKmsg(t, "after kill9")
			}
			if h29bProbe("gckill") {
				t.Run("gckill", func(t *testing.T) { h29bGCKill(t, dev) })
				h29bKmsg(t, "after gckill")
			}
			if h29bProbe("rmread") {
				t.Run("rmread", func(t *testing.T) { h29bRmColdRead(t, dev) })
				h29bKmsg(t, "after rmread")
			}
			if h29bProbe("fio") {
				t.Run("fio", func(t *testing.T) { h29bFioDeep(t, dev) })
				h29bKmsg(t, "after fio")
			}
			if h29bProbe("full") {
				t.Run("full", func(t *testing.T) { h29bFull(t, dev) })
				h29bKmsg(t, "after full")
			}
		})
	}
}

// h29bKill9: the kill -9 model of kill9_helpers_test.go (stamped files
// overwritten and fsynced, renames over open files, churned names) on
// the real device, with one more client overwriting a large file
// without fsync so that GC runs while the daemon is killed; the next
// daemons are killed during recovery too; fsck after each cycle.
func h29bKill9(t *testing.T, dev string) {
	h29bFormat(t, dev, h29bZones)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 29))
	sock := filepath.Join(t.TempDir(), "zf.sock")
	m := newKill9Model()
	p := serveKill9(t, dev, sock)
	m.create(t, sock)
	st0, _ := kill9Stats(sock)
	fill := int64(st0.FreeZones) * 3 << 20 // about half the free space, overwritten
	early := 0
	for cycle := range h29bRounds(6) {
		cl := m.startClients(sock, rng, cycle, 2)
		fseed := rng.Uint64()
		cl.Go(sock, func(ctx context.Context, c *server.Client) { h29bOverwrite(ctx, c, "gcfill", fill, fseed) })
		time.Sleep(time.Duration(300+rng.IntN(2500)) * time.Millisecond)
		if st, ok := kill9Stats(sock); ok {
			t.Logf("cycle %d before kill: free zones %d, gc resets %d, gc written %d, checkpoints %d",
				cycle, st.FreeZones, st.GCResets, st.GCWritten, st.Checkpoints)
		}
		p.kill()
		cl.stop()
		early += killDuringRecovery(t, dev, sock, rng, 1+rng.IntN(3))
		fsckClean(t, dev, fmt.Sprintf("after cycle %d", cycle))
		p = serveKill9(t, dev, sock)
		m.check(t, sock, cycle)
	}
	h29bDaemonLog(t, p.out.String())
	p.interrupt()
	fsckClean(t, dev, "after a clean stop")
	t.Logf("%d daemons killed before they served", early)
}

// h29bOverwrite overwrites name (size bytes) at random, 64 KiB at a
// time, never fsyncing, until ctx ends or a call fails.
func h29bOverwrite(ctx context.Context, c *server.Client, name string, size int64, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	bg := context.Background()
	h, _, err := c.Open(bg, name, server.OpenCreate)
	if err != nil {
		return
	}
	buf := bytes.Repeat([]byte{0x77}, 64<<10)
	for ctx.Err() == nil {
		off := rng.Int64N(size/int64(len(buf))) * int64(len(buf))
		if _, err := c.WriteAt(bg, h, buf, off); err != nil {
			return
		}
	}
}

// h29bRmColdRead: files written and fsynced, the daemon restarted (so
// that their reads are cold, from the device), then readers read each
// file while it is removed. Nothing may hang: a reader that opened the
// file reads all of it right (an open file outlives its name), one that
// came too late gets ENOENT; the daemon answers after every round.
func h29bRmColdRead(t *testing.T, dev string) {
	h29bFormat(t, dev, h29bZones)
	dir := t.TempDir()
	sock := filepath.Join(dir, "zf.sock")
	const files, size = 6, 3 << 20
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	d := startServeCache(t, dev, sock, "16M")
	for round := range h29bRounds(8) {
		c := dialSocket(t, sock)
		for i := range files {
			name := fmt.Sprintf("r%d-%d", round, i)
			writeFile(t, c, name, 0, hostilePattern(name, 0, size), true)
		}
		c.Close()
		h29bDaemonLog(t, d.stderr.String())
		d.stop()
		d = startServeCache(t, dev, sock, "16M")
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var fails []string
		fail := func(f string, a ...any) { mu.Lock(); fails = append(fails, fmt.Sprintf(f, a...)); mu.Unlock() }
		for i := range files {
			name := fmt.Sprintf("r%d-%d", round, i)
			want := hostilePattern(name, 0, size)
			for r := range 3 {
				wg.Go(func() {
					c, err := server.Dial(ctx, sock, 4<<20)
					if err != nil {
						fail("dial: %v", err)
						return
					}
					defer c.Close()
					h, n, err := c.Open(ctx, name, 0)
					if err != nil {
						if !errors.Is(err, os.ErrNotExist) {
							fail("open %s: %v", name, err)
						}
						return
					}
					defer c.CloseFile(ctx, h)
					if n != size {
						fail("%s: size %d", name, n)
						return
					}
					chunk := 4096 << (r * 4) // 4 KiB, 64 KiB, 1 MiB
					buf := make([]byte, chunk)
					for off := 0; off < size; off += chunk {
						if _, err := c.ReadAt(ctx, h, buf, int64(off)); err != nil {
							fail("read %s at %d: %v", name, off, err)
							return
						}
						if !bytes.Equal(buf, want[off:off+chunk]) {
							fail("%s at %d: wrong data", name, off)
							return
						}
					}
				})
			}
			wg.Go(func() {
				time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond)
				c, err := server.Dial(ctx, sock, 1<<20)
				if err != nil {
					fail("dial: %v", err)
					return
				}
				defer c.Close()
				if err := c.Remove(ctx, name); err != nil {
					fail("remove %s: %v", name, err)
				}
			})
		}
		wg.Wait()
		if ctx.Err() != nil {
			t.Fatalf("round %d: hung (%v); fails %v\n%s", round, ctx.Err(), fails, d.stderr)
		}
		cancel()
		if len(fails) > 0 {
			t.Fatalf("round %d: %s\n%s", round, strings.Join(fails, "\n"), d.stderr)
		}
		if _, ok := kill9Stats(sock); !ok {
			t.Fatalf("round %d: the daemon does not answer\n%s", round, d.stderr)
		}
	}
	h29bDaemonLog(t, d.stderr.String())
	d.stop()
	fsckClean(t, dev, "after rm against cold reads")
}

// h29bFioDeep: fio jobs deep (iodepth 256 to 4094, the most the
// daemon's rings take) and wide (8 to 16 jobs), mixed reads and writes
// of 4 KiB to 4 MiB, as much as fits the shared memory a guest of 3 GiB
// allows (1 GiB; more is refused cleanly), against the daemon on the
// real device; none may stop making progress, and the daemon must answer
// after each.
func h29bFioDeep(t *testing.T, dev string) {
	_, engine := fioEnv(t)
	h29bFormat(t, dev, h29bZones)
	dir := t.TempDir()
	d := startServeCache(t, dev, filepath.Join(dir, "zf.sock"), "32M")
	st, _ := kill9Stats(d.socket)
	free := int64(st.FreeZones) << 20 * 6 / 2 // half, in bytes (6-8 MiB zones)
	cases := []struct {
		depth, jobs int
		rw, bs      string
		verify      bool
	}{
		{256, 8, "randrw", "4k-256k", false},
		{1024, 16, "randrw", "4k-32k", false},
		{4094, 16, "randwrite", "4k-4k", false},
		{4094, 8, "rw", "4k-16k", false},
		{64, 3, "randrw", "4k-4m", false},
		{256, 8, "randwrite", "4k-64k", true},
	}
	for i, cs := range cases {
		// Each job's file is its share of half the free space, in
		// whole MiB, and at least its largest block: a floor of 4 MiB
		// gave 16 jobs 64 MiB, more than the 36 MiB a device of zones
		// with 6 MiB of capacity holds beside GC's reserve, and fio's
		// random writes then got ENOSPC as soon as they had touched
		// enough blocks, a full device, not the daemon's fault.
		size := max(free/int64(cs.jobs)>>20<<20, 1<<20, maxBlock(cs.bs))
		args := []string{"--name=deep", "--ioengine=external:" + engine, "--sock=" + d.socket,
			fmt.Sprintf("--iodepth=%d", cs.depth), fmt.Sprintf("--numjobs=%d", cs.jobs), "--rw=" + cs.rw,
			"--bsrange=" + cs.bs, fmt.Sprintf("--size=%d", size), "--thread", "--group_reporting"}
		if cs.verify {
			args = append(args, "--verify=crc32c", "--verify_fatal=1", "--verify_state_save=0")
		} else {
			args = append(args, "--time_based=1", "--runtime=8", "--fsync=16")
		}
		for round := range h29bRounds(1) {
			out, err := h29bFioWatched(t, d, args...)
			if err != nil || strings.Contains(out, "verify:") || !strings.Contains(out, "err= 0") {
				t.Errorf("fio case %d round %d %v: %v\n%s", i, round, args[3:], err, out)
			}
			if _, ok := kill9Stats(d.socket); !ok {
				t.Fatalf("case %d: the daemon does not answer after fio\n%s", i, d.stderr)
			}
			t.Logf("case %d %+v: done", i, cs)
		}
		c := dialSocket(t, d.socket)
		ls, _ := c.List(context.Background())
		for _, e := range ls {
			c.Remove(context.Background(), e.Name)
		}
		c.Close()
	}
	h29bDaemonLog(t, d.stderr.String())
	d.stop()
	fsckClean(t, dev, "after deep fio")
}

// maxBlock is the largest block size of a fio --bsrange (4k-256k).
func maxBlock(bsrange string) int64 {
	_, hi, _ := strings.Cut(bsrange, "-")
	n, err := strconv.ParseInt(strings.TrimRight(hi, "km"), 10, 64)
	if err != nil {
		return 0
	}
	switch hi[len(hi)-1] {
	case 'k':
		n <<= 10
	case 'm':
		n <<= 20
	}
	return n
}

// h29bFull: fio fills the device to ENOSPC (never EIO), then files are
// removed and the writes go on, rounds over: GC must give the space back
// each time and every verify pass.
func h29bFull(t *testing.T, dev string) {
	_, engine := fioEnv(t)
	h29bFormat(t, dev, h29bZones)
	dir := t.TempDir()
	d := startServeCache(t, dev, filepath.Join(dir, "zf.sock"), "16M")
	job := func(name string, args ...string) []string {
		return append([]string{"--name=" + name, "--ioengine=external:" + engine, "--sock=" + d.socket,
			"--filename=" + name, "--iodepth=64"}, args...)
	}
	for round := range h29bRounds(3) {
		for i := range 3 {
			name := fmt.Sprintf("huge%d", i)
			out, err := h29bFioWatched(t, d, job(name, "--rw=randwrite", "--bsrange=4k-1m", "--size=200m")...)
			if err == nil {
				continue // the device had room
			}
			if !strings.Contains(out, "No space left on device") || strings.Contains(out, "Input/output error") {
				t.Fatalf("round %d: fio past the device: %v, want ENOSPC\n%s", round, err, out)
			}
		}
		c := dialSocket(t, d.socket)
		st, _ := c.Stats(context.Background())
		t.Logf("round %d full: free zones %d, gc resets %d", round, st.FreeZones, st.GCResets)
		for i := range 3 {
			if err := c.Remove(context.Background(), fmt.Sprintf("huge%d", i)); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("round %d: remove on a full device: %v", round, err)
			}
		}
		c.Close()
		out, err := h29bFioWatched(t, d, job("after", "--rw=randwrite", "--bs=16k", "--size=24m",
			"--verify=crc32c", "--verify_fatal=1", "--verify_state_save=0")...)
		checkFio(t, "after", out, err, false)
		if !strings.Contains(out, "READ: bw=") {
			t.Fatalf("round %d: nothing verified after the remove:\n%s", round, out)
		}
	}
	h29bDaemonLog(t, d.stderr.String())
	d.stop()
	fsckClean(t, dev, "after the full rounds")
}

// h29bGCKill is TestFioKill9DuringGCKeepsSyncedFile on the real device,
// rounds over: file a written twice (the second time half of it, at
// random) and fsynced, then fio overwrites b without fsync, 64 deep,
// until GC has copied some MiB, and the daemon is killed. fsck must find
// the device clean, and every block of a hold one of its two patterns.
func h29bGCKill(t *testing.T, dev string) {
	_, engine := fioEnv(t)
	h29bFormat(t, dev, h29bZones)
	dir := t.TempDir()
	d := startServeCache(t, dev, filepath.Join(dir, "zf.sock"), "16M")
	const aSize = 12 << 20
	job := func(name string, args ...string) []string {
		return append([]string{"--name=" + name, "--ioengine=external:" + engine, "--sock=" + d.socket, "--bs=4k"}, args...)
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	for round := range h29bRounds(3) {
		out, err := h29bFioWatched(t, d, job("a1", "--filename=a", "--rw=write", "--size=12m", "--iodepth=32",
			"--buffer_pattern=0x11", "--end_fsync=1")...)
		checkFio(t, "a1", out, err, false)
		out, err = h29bFioWatched(t, d, job("a2", "--filename=a", "--rw=randwrite", "--size=12m", "--io_size=6m",
			"--iodepth=32", "--buffer_pattern=0x22", "--end_fsync=1")...)
		checkFio(t, "a2", out, err, false)
		gcBefore := d.metric("zonefold_gc_written_bytes_total")
		want := gcBefore + float64((1+rng.IntN(6))<<20)
		_, wait := startFio(t, job("b", "--filename=b", "--rw=randwrite", "--size=24m", "--iodepth=64",
			"--time_based=1", "--runtime=120")...)
		deadline := time.Now().Add(90 * time.Second)
		for d.metric("zonefold_gc_written_bytes_total") < want {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: GC copied %v bytes in 90 s of overwrites\n%s", round,
					d.metric("zonefold_gc_written_bytes_total")-gcBefore, d.stderr)
			}
			time.Sleep(5 * time.Millisecond)
		}
		d.kill9()
		wait(time.Minute)
		fsckClean(t, dev, fmt.Sprintf("after kill -9 during GC, round %d", round))
		var c *server.Client
		var h uint32
		var size int64
		d, c, h, size = restartAndOpen(t, d, "a")
		if size != aSize {
			t.Fatalf("round %d: a after kill -9: size %d; want %d", round, size, aSize)
		}
		ctx := context.Background()
		buf := make([]byte, 256<<10)
		counts := map[byte]int{}
		for off := int64(0); off < aSize; off += int64(len(buf)) {
			if _, err := c.ReadAt(ctx, h, buf, off); err != nil {
				t.Fatalf("round %d: read a at %d: %v", round, off, err)
			}
			for blk := 0; blk < len(buf); blk += 4096 {
				b := buf[blk : blk+4096]
				if (b[0] != 0x11 && b[0] != 0x22) || !bytes.Equal(b, bytes.Repeat(b[:1], 4096)) {
					t.Fatalf("round %d: a's block at %d after kill -9 during GC: starts % x", round, off+int64(blk), b[:16])
				}
				counts[b[0]]++
			}
		}
		c.CloseFile(ctx, h)
		c.Remove(ctx, "b")
		t.Logf("round %d: killed after GC copied %.0f bytes; a holds %v", round,
			want-gcBefore, counts)
	}
	h29bDaemonLog(t, d.stderr.String())
	d.stop()
}

// h29bDaemonLog logs the warnings and errors in a daemon's log (at most
// 20 of them): a write error the daemon got around still shows here.
func h29bDaemonLog(t *testing.T, log string) {
	t.Helper()
	var warn []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			warn = append(warn, l)
		}
	}
	if len(warn) > 20 {
		warn = append(warn[:20], fmt.Sprintf("... %d more", len(warn)-20))
	}
	if len(warn) > 0 {
		t.Logf("daemon warnings:\n%s", strings.Join(warn, "\n"))
	}
}

// h29bStall is how long the daemon's counters may stand still while fio
// runs before h29bFioWatched calls it a hang: under TCG on a loaded
// host, fio's jobs take more than runFioWatched's 10 s to fault in half
// a GiB of shared memory before their first request.
const h29bStall = 90 * time.Second

// h29bFioWatched is runFioWatched with h29bStall for noProgress.
func h29bFioWatched(t *testing.T, d *daemonProc, args ...string) (string, error) {
	t.Helper()
	return runFioWatchedFor(t, d, h29bStall, args...)
}
