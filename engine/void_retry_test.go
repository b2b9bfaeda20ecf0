package engine

import (
	"bytes"
	"syscall"
	"testing"
)

// A switch that voids failed appends in the next half (the active one
// has no room) writes the voids there, flushes the data — the failed
// records are durable from then on — and only then writes its
// checkpoint. When that checkpoint write fails, the voids in the next
// half are the only durable ones. These tests have whatever resets that
// half next fail its first metadata write (after the reset, that was
// the void write), then crash:
// the records must still read as void.

// voidedInNextHalf sets up that state: a, fsynced; a switch that failed
// (the active half finished, no room); a's overwrite failing part-way;
// and a settling switch that voided it in the next half and flushed,
// with its checkpoint write failing. b, fsynced too, is left for a test
// to fail another append with. It returns the engine and b.
func voidedInNextHalf(t *testing.T, devName string, cfg Config) (*Engine, *File) {
	t.Helper()
	e := formatOpen(t, devName, cfg)
	a := createSynced(t, e, "a", bytes.Repeat([]byte{0xaa}, 64<<10))
	b := createSynced(t, e, "b", bytes.Repeat([]byte{0xbb}, 64<<10))
	failSwitch(t, e)
	overwriteFailingAppend(t, e, a)
	failNextCheckpointWrite(t)
	if err := e.SyncNamespace(); err == nil {
		t.Fatal("set-up: the settling switch's checkpoint write did not fail")
	}
	testHookMetaWrite = nil
	return e, b
}

// crashEmu crashes e (nothing more reaches its emu device) and closes
// the device as it stands: what was written stays, flushed or not.
func crashEmu(t *testing.T, e *Engine) {
	t.Helper()
	emu := emuOf(t, e)
	e.crashForTest()
	emu.Close()
}

// retryFailingThenCrash retries the failed switch with every metadata
// write failing (after a reset, the first is the voids'), then crashes.
func retryFailingThenCrash(t *testing.T, e *Engine) {
	t.Helper()
	failMetaWrites(t)
	err := e.SyncNamespace()
	testHookMetaWrite = nil
	t.Logf("the retried switch: %v", err)
	crashEmu(t, e)
}

// failMetaWrites makes every metadata write fail with EIO until the
// test ends (or sets testHookMetaWrite to nil).
func failMetaWrites(t *testing.T) {
	testHookMetaWrite = func(*Engine, int, int64, []byte) error { return syscall.EIO }
	t.Cleanup(func() { testHookMetaWrite = nil })
}

// TestVoidRetryKeepsDurableVoids: the switch's retry must not erase the
// voids an earlier attempt made durable before it has written them
// again (it reset the next half first, and a crash, or a failed void
// write, in between had recovery replay a's torn record: EIO).
func TestVoidRetryKeepsDurableVoids(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	e, _ := voidedInNextHalf(t, devName, cfg)

	retryFailingThenCrash(t, e)

	e = reopen(t, devName, cfg)
	defer e.Close()
	readsUntorn(t, e, "a", 64<<10, "a, fsynced, after its failed overwrite was voided in the next half and the switch retried")
}

// TestRecoveryCheckpointKeepsDurableVoids: recovery takes the voids from
// the half the failed switch wrote them in; its own checkpoint must not
// erase them before they are durable again.
func TestRecoveryCheckpointKeepsDurableVoids(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	e, _ := voidedInNextHalf(t, devName, cfg)
	crashEmu(t, e)

	failMetaWrites(t)
	if e, err := Open(devName, cfg); err == nil {
		t.Log("recovery opened with its metadata writes failing")
		crashEmu(t, e)
	} else {
		t.Logf("recovery with its metadata writes failing: %v", err)
	}
	testHookMetaWrite = nil

	e = reopen(t, devName, cfg)
	defer e.Close()
	readsUntorn(t, e, "a", 64<<10, "a, fsynced, after its failed overwrite was voided in the next half and a recovery's checkpoint failed")
}

// TestVoidRetryAppendsNewVoids: a failure between the failed switch and
// its retry is voided after the earlier voids, the retry's checkpoint
// lands after both, and the half so written is one recovery reads and
// the log goes on in: after a power cut, both files read as fsynced, and
// later switches work.
func TestVoidRetryAppendsNewVoids(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	e, b := voidedInNextHalf(t, devName, cfg)
	overwriteFailingAppend(t, e, b)
	at := e.meta.nextVoidsEnd
	if at == 0 {
		t.Fatal("set-up: the failed switch left no voids in the next half")
	}
	if err := e.SyncNamespace(); err != nil {
		t.Fatalf("the retried switch: %v", err)
	}
	if e.meta.wp <= at {
		t.Fatalf("the retried switch's checkpoint ends at %d, not after the voids it kept (%d)", e.meta.wp, at)
	}
	e = powerCutReopen(t, e, devName, cfg)
	readsUntorn(t, e, "a", 64<<10, "a, after the retried switch and a power cut")
	readsUntorn(t, e, "b", 64<<10, "b, after the retried switch and a power cut")
	for i := range 3 {
		if err := e.checkpoint(); err != nil {
			t.Fatalf("switch %d after the retried one: %v", i, err)
		}
	}
	e = powerCutReopen(t, e, devName, cfg)
	defer e.Close()
	for _, name := range []string{"a", "b"} {
		f, err := e.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 64<<10)
		if _, err := f.ReadAt(got, 0); err != nil {
			t.Fatalf("%s after more switches and a power cut: %v", name, err)
		}
	}
}
