package pebblefs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/uring"
	"github.com/zonefold/zonefold/zns"
)

// TestH37BFaults is TestCrash with a device fault before each power cut:
// the child arms one of the emulated device's faults (a write-back write
// or append that fails with EIO, every write failing from then on, a
// flush that fails with EIO and makes nothing durable, a read that fails
// with EIO) at a random device operation, and the power is cut some
// operations later. Pebble may fail commits (a writer stops at its first
// error, its commit in flight), Gets and background jobs, or end the
// process (a Fatalf or a panic: the child dies there, as a process that
// exits on the error would); it must never acknowledge a write it loses,
// and the DB must reopen with every acknowledged write after the cut.
// A fifth kind, persist, arms no fault and makes every write that
// completed durable at the cut (emu.Flush, then SIGKILL): the process
// dies but the device keeps what it took, the states a power cut
// (exactly the last Flush) never gives. One life in eight ends with a
// cut where each zone keeps part of what it took since the last flush
// (cutDevice.keepCut; every life with PEBBLEFS_CUT_KEEP, persist lives
// too). H37B_KIND=kind runs one kind.
func TestH37BFaults(t *testing.T) {
	if os.Getenv(h37bEnv.dev) != "" {
		t.Skip("in the child")
	}
	lives := 8 // about 3 s a life; H37B_LIVES for more
	if testing.Short() {
		lives = 4
	}
	if s := os.Getenv("H37B_LIVES"); s != "" {
		lives, _ = strconv.Atoi(s)
	}
	seed := uint64(37)
	if s := os.Getenv("H37B_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	devName := emuDevice(t, 64, "2M")
	cfg := testConfig()
	e := formatOpen(t, devName, 0, cfg)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 37))
	m := model{}
	kinds := map[string]int{}
	var acked, applied, fatal, stopped, panics, reported int
	for life := range lives {
		kind := []string{"write", "flush", "read", "writes", "persist"}[rng.IntN(5)]
		if k := os.Getenv("H37B_KIND"); k != "" {
			kind = k // one kind of fault only
		}
		faultAt := 1 + rng.IntN(crashMaxOps)
		cut := fmt.Sprintf("%d %s %d", faultAt+1+rng.IntN(600), kind, faultAt)
		kinds[kind]++
		logPath, panicked := runFaultLife(t, devName, life, cut)
		if panicked {
			panics++
		}
		l := parseCrashLog(t, logPath)
		b, err := os.ReadFile(logPath)
		if err != nil {
			t.Fatal(err)
		}
		saw := false // an error of the fault's, reported to Pebble
		for _, ln := range strings.Split(string(b), "\n") {
			kind, _, _ := strings.Cut(ln, " ")
			switch kind {
			case "FAULTFATAL":
				fatal++
			case "STOPPED":
				stopped++
			case "PEBBLEERR", "GETERR", "COMMITERR":
				t.Logf("life %d: %.300s", life, ln)
			default:
				continue
			}
			saw = true
		}
		if saw || panicked || bytes.Contains(b, []byte("\nIOERR ")) || kind == "persist" {
			reported++
		}
		t.Logf("life %d (%s): ended %.200q", life, cut, l.end)
		e, db, m2 := reopenAfterCut(t, life, cut, devName, cfg, m, l, &acked, &applied)
		m = m2
		if err := db.Close(); err != nil {
			t.Fatalf("life %d: close Pebble: %v", life, err)
		}
		if err := e.Close(); err != nil {
			t.Fatalf("life %d: close engine: %v", life, err)
		}
	}
	t.Logf("%d lives (faults %v; %d showed their fault (an error to Pebble, or a persisting cut); %d ended by Pebble's Fatalf, %d by a Pebble panic, %d with both writers failed), %d acknowledged operations all recovered, %d in flight recovered whole, %d keys",
		lives, kinds, reported, fatal, panics, stopped, acked, applied, len(m))
	if reported == 0 || acked == 0 {
		t.Fatal("no fault reached Pebble, or nothing was acknowledged: the test tested nothing")
	}
}

// runFaultLife is runCutLife, except that a child that panicked after
// its fault (Pebble panics on a WAL it cannot close, in rotateWAL) is a
// process that died of the error: it reports panicked.
func runFaultLife(t *testing.T, devName string, life int, cut string) (logPath string, panicked bool) {
	t.Helper()
	logPath = fmt.Sprintf("%s/life%02d.log", t.TempDir(), life)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestH37BFaultsChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), h37bEnv.dev+"="+devName, h37bEnv.log+"="+logPath,
		h37bEnv.cut+"="+cut, h37bEnv.life+"="+strconv.Itoa(life))
	out, err := cmd.CombinedOutput()
	l, _ := os.ReadFile(logPath)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		ws := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return logPath, false
		}
		if ws.Exited() && ws.ExitStatus() == 2 && bytes.Contains(append([]byte("\n"), l...), []byte("\nFAULT ")) && bytes.Contains(out, []byte("panic: ")) {
			return logPath, true
		}
	}
	t.Fatalf("life %d (cut %s): child ended with %v, not the power cut; errors it met:\n%s\noutput:\n%s\nlog tail:\n%s",
		life, cut, err, ioErrors(l), tail(out, 3000), tail(l, 2000))
	return "", false
}

var h37bEnv = cutEnv{"H37B_FAULT_DEV", "H37B_FAULT_LOG", "H37B_FAULT_CUT", "H37B_FAULT_LIFE"}

// faultDevice arms the emu's fault at the faultAt-th device change, then
// hands each change to the cutDevice, which cuts the power later.
type faultDevice struct {
	*cutDevice
	kind    string
	faultAt int64
	armed   chan struct{}
	once    sync.Once
}

func (d *faultDevice) count() {
	if d.kind == "persist" && !d.keepCut {
		// No fault; at the cut, every write that completed is made
		// durable first: a process that dies on a device that keeps
		// what it took (kill -9, not a power cut), or a drive whose
		// cache happened to reach the media.
		if d.cutDevice.n.Load()+1 >= d.cutAt {
			d.once.Do(func() {
				err := d.emu.Flush()
				fmt.Fprintf(d.log, "PERSISTCUT %d %v\n", d.cutAt, err)
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			})
			select {} // dying
		}
		return
	}
	if d.cutDevice.n.Load()+1 < d.faultAt {
		return // (concurrent changes may pass faultAt together: >=, once)
	}
	d.once.Do(func() {
		fmt.Fprintf(d.log, "FAULT %s at %d\n", d.kind, d.faultAt)
		switch d.kind {
		case "write":
			d.emu.FailWrite(1)
		case "writes":
			d.emu.FailWrites(true)
		case "flush":
			d.emu.FailFlush(1)
		case "read":
			d.emu.FailRead(1)
		}
		close(d.armed)
	})
}

func (d *faultDevice) isArmed() bool {
	select {
	case <-d.armed:
		return true
	default:
		return false
	}
}

func (d *faultDevice) Append(zone int, bufs [][]byte, c zns.AppendCompletion) error {
	d.count()
	return d.cutDevice.Append(zone, bufs, c)
}

func (d *faultDevice) Write(zone int, off int64, bufs [][]byte, c uring.Completion) error {
	d.count()
	return d.cutDevice.Write(zone, off, bufs, c)
}

func (d *faultDevice) Flush() error {
	d.count()
	return d.cutDevice.Flush()
}

func (d *faultDevice) ResetZone(zone int) error {
	d.count()
	return d.cutDevice.ResetZone(zone)
}

func (d *faultDevice) FinishZone(zone int) error {
	d.count()
	return d.cutDevice.FinishZone(zone)
}

// faultLogger: a Fatalf after the fault is Pebble ending the process on
// the error: the child dies there. One before it fails the life.
type faultLogger struct{ d *faultDevice }

func (faultLogger) Infof(string, ...any) {}
func (l faultLogger) Errorf(format string, args ...any) {
	if l.d.isArmed() {
		fmt.Fprintf(l.d.log, "PEBBLEERR "+format+"\n", args...)
	}
}
func (l faultLogger) Fatalf(format string, args ...any) {
	if l.d.frozen.Load() {
		select {}
	}
	if l.d.isArmed() {
		fmt.Fprintf(l.d.log, "FAULTFATAL "+format+"\n", args...)
		l.d.die()
	}
	fmt.Fprintf(l.d.log, "FATAL "+format+"\n", args...)
	os.Exit(3)
}

func TestH37BFaultsChild(t *testing.T) {
	// startCutChild wants "AT tear|kill|persist|keep KEEP": the kind rides in the
	// middle field and the fault's operation in the last.
	f := strings.Fields(os.Getenv(h37bEnv.cut))
	if len(f) != 3 {
		t.Skip("the fault test's child process (run by TestH37BFaults)")
	}
	cd, life, die := startCutChild(t, h37bEnv)
	if cd == nil {
		t.Skip("the fault test's child process (run by TestH37BFaults)")
	}
	cd.tear = false
	// One life in eight (every life with PEBBLEFS_CUT_KEEP) cuts with
	// each zone keeping some of what it took since the last flush, the
	// fault's aftermath partly on the media.
	cd.keepCut = life%8 == 3 || cutKeepAll()
	faultAt, _ := strconv.ParseInt(f[2], 10, 64)
	fd := &faultDevice{cutDevice: cd, kind: f[1], faultAt: faultAt, armed: make(chan struct{})}
	cfg := testConfig()
	cfg.CacheBytes, cfg.DirtyLimit = 4<<20, 2<<20 // so that reads reach the device
	e, err := engine.OpenDevice(fd, cfg)
	if err != nil {
		if cd.frozen.Load() {
			select {} // the cut landed in the open: power is being cut
		}
		if fd.isArmed() {
			fmt.Fprintf(cd.log, "FAULTFATAL open engine: %v\n", err)
			fd.die()
		}
		die("open engine: %v", err)
	}
	o := smallOptions(New(e))
	o.FS = crashFS{FS: o.FS, d: cd}
	o.Logger = faultLogger{fd}
	db, err := pebble.Open("db", o)
	if err != nil {
		if fd.isArmed() {
			fmt.Fprintf(cd.log, "FAULTFATAL open: %v\n", err)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		die("open Pebble: %v", err)
	}
	seed := uint64(life)
	var wg sync.WaitGroup
	for w := range crashWriters {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for seq := 0; ; seq++ {
				b := crashBatch(rng, db, w, seq, cd.log)
				if err := b.Commit(pebble.Sync); err != nil {
					if cd.frozen.Load() {
						select {}
					}
					if !fd.isArmed() {
						die("writer %d: commit %d before the fault: %v", w, seq, err)
					}
					fmt.Fprintf(cd.log, "COMMITERR %d %d %v\n", w, seq, err)
					return // its commit stays in flight
				}
				fmt.Fprintf(cd.log, "A %d %d\n", w, seq)
				// Reads too, so that a read fault meets a Get.
				k := fmt.Sprintf("w%d-%04d", w, rng.IntN(crashKeys))
				if v, c, err := db.Get([]byte(k)); err == nil {
					_ = v
					_ = c.Close()
				} else if err != pebble.ErrNotFound {
					fmt.Fprintf(cd.log, "GETERR %d %v\n", w, err)
				}
			}
		})
	}
	go func() {
		time.Sleep(2 * time.Minute)
		die("no power cut after 2 minutes (%d device operations, cut at %d)", cd.n.Load(), cd.cutAt)
	}()
	wg.Wait()
	fmt.Fprintf(cd.log, "STOPPED both writers failed\n")
	fd.die()
}

// die ends the child after its fault: the power is cut there, keeping
// part of each zone's unflushed writes in a keeping life (most fault
// lives end here, before the cut's operation).
func (d *faultDevice) die() {
	if d.keepCut {
		d.cutKeepingOnce()
		select {} // dying (or d is frozen for a cut already)
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}
