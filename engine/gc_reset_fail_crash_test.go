package engine

import (
	"bytes"
	"testing"
)

// TestCrashWhileAZonesResetWaitsForRetryLosesNothing: GC relocates a
// zone's data, logs its reset, and the device refuses the reset (the zone
// went read-only). Until a later pass retries, the zone stays full with
// its reset decided (resetPending), so a checkpoint in that window records
// its write pointer as 0. A crash then must lose nothing: recovery scans
// the zone from its start, finds only records older than the checkpoint
// (its data was relocated, and made durable, before the reset was
// logged), and every file reads back as written.
func TestCrashWhileAZonesResetWaitsForRetryLosesNothing(t *testing.T) {
	devName := emuDevice(t, 12, "256K", "")
	cfg := Config{CacheBytes: 2 << 20, DirtyLimit: 1 << 20}
	cfg.GC.Disabled = true
	e := formatOpen(t, devName, cfg)
	defer func() { e.Close() }()
	const size = 100000
	names := fillWithFiles(t, e, size)
	// One file goes from the first full zone that holds two or more:
	// garbage worth collecting beside live data that must be relocated.
	var victim *zone
	for _, n := range names {
		if z := e.zoneAt(devOf(t, e, n, 0).dev); z.state.Load() == zoneFull && victim == nil {
			victim = z
		}
	}
	var gone string
	for _, n := range names {
		x := devOf(t, e, n, 0)
		if e.zoneAt(x.dev) == victim && e.zoneAt(x.dev+x.len-1) == victim {
			gone = n
			break
		}
	}
	if victim == nil || gone == "" {
		t.Fatal("set-up: no full zone with a file wholly in it")
	}
	if err := e.Remove(gone); err != nil {
		t.Fatal(err)
	}
	if err := emuOf(t, e).ZoneReadOnly(victim.idx); err != nil {
		t.Fatal(err)
	}
	_, err := collectVictim(e, victim)
	if err == nil || victim.valid.Load() != 0 || !victim.resetPending.Load() {
		t.Fatalf("set-up: collect of a zone that refuses its reset: %v; valid %d, reset pending %v; want an error, 0, true",
			err, victim.valid.Load(), victim.resetPending.Load())
	}
	if err := e.checkpoint(); err != nil { // records the zone's write pointer as 0
		t.Fatal(err)
	}
	e.crashForTest()
	e = reopen(t, devName, cfg)
	for i, n := range names {
		if n == gone {
			continue
		}
		want := bytes.Repeat([]byte{byte(i)}, size)
		if got := readAll(t, e, n); !bytes.Equal(got, want) {
			t.Fatalf("%s after a crash with zone %d's reset pending: %d bytes, not as written", n, victim.idx, len(got))
		}
	}
}
