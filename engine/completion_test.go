package engine

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"
)

// donePending is a writeback.Pending that signals each Done on a channel.
type donePending struct{ ch chan error }

func (p donePending) Add(int)        {}
func (p donePending) Done(err error) { p.ch <- err }

// TestAppendCompletionDoesNotAllocate: an append's completion — handed
// from the reaper to the completer, which maps the record over the file's
// older copy of the same bytes, frees the op and reports to the flush —
// allocates nothing. (It allocated a copy of the overlapping extents on
// every record, on the reaper.)
func TestAppendCompletionDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	e := formatOpen(t, emuDevice(t, 16, "1M", ""), smallConfig())
	defer e.Close()
	h, err := e.Create("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.WriteAt(bytes.Repeat([]byte{1}, 64<<10), 0); err != nil {
		t.Fatal(err)
	}
	if err := h.Sync(); err != nil {
		t.Fatal(err)
	}
	f := h.f
	var old extent
	f.mu.RLock()
	f.ext.lookup(16<<10, 8<<10, func(x extent) { old = x })
	f.mu.RUnlock()
	z := e.zoneAt(old.dev)
	if z == nil || old.len != 8<<10 {
		t.Fatalf("no 8 KiB mapped at 16 KiB: %+v", old)
	}
	p := donePending{ch: make(chan error, 1)}
	// A newer version of the same 8 KiB, as if appended where the old
	// copy lies (so that the zone's valid bytes stay true).
	complete := func() {
		op := e.takeOp()
		op.f, op.z, op.p, op.gc = f, z, p, nil
		op.hdr.Kind, op.hdr.File, op.hdr.Seq = KindData, f.id, e.seq.Add(1)
		op.hdr.Extents = append(op.hdr.Extents[:0], RecordExtent{FileOff: old.off, Len: uint32(old.len), Version: op.hdr.Seq})
		op.hdr.DataLen = uint32(old.len)
		op.hdrI, op.bufs = e.takeHeader(op.bufs[:0])
		z.writers.Add(1)
		e.inflight.Add(1)
		op.Appended(old.dev-BlockSize, nil)
		if err := <-p.ch; err != nil {
			t.Fatal(err)
		}
	}
	// Ops are taken in turn; each one's slices grow on its first use.
	for range cap(e.ops) {
		complete()
	}
	if n := testing.AllocsPerRun(500, complete); n != 0 {
		t.Errorf("%v allocations per append completion", n)
	}
	checkValidCounts(t, e)
}

// parkedIn waits until the goroutine running caller is parked in waiter
// (on a channel), and fails the test if it finds it sleeping instead: a
// poll loop. It returns false if the goroutine never parked there.
func parkedIn(t *testing.T, caller, waiter string) bool {
	t.Helper()
	buf := make([]byte, 4<<20)
	for range 5000 {
		n := runtime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			if !strings.Contains(g, caller) {
				continue
			}
			state := g[strings.Index(g, "[")+1 : strings.Index(g, "]")]
			state, _, _ = strings.Cut(state, ",")
			switch {
			case state == "sleep":
				t.Errorf("%s waits by sleeping (a poll loop):\n%s", caller, g)
				return false
			case state == "chan receive" && strings.Contains(g, waiter):
				return true
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Errorf("%s never parked in %s", caller, waiter)
	return false
}

// TestCheckpointWaitsForAppendsWithoutPolling: a checkpoint that finds
// appends in flight blocks until the last one completes, parked on a
// channel (it slept in 50 µs steps and polled the count).
func TestCheckpointWaitsForAppendsWithoutPolling(t *testing.T) {
	e := formatOpen(t, emuDevice(t, 16, "1M", ""), smallConfig())
	defer e.Close()
	e.inflight.Add(1) // an append in flight
	done := make(chan error, 1)
	go func() {
		e.nsMu.RLock()
		defer e.nsMu.RUnlock()
		done <- e.checkpoint()
	}()
	parkedIn(t, "engine.(*Engine).checkpointLocked", "engine.(*Engine).waitUntil")
	select {
	case err := <-done:
		t.Errorf("checkpoint returned (%v) with an append in flight", err)
		return
	default:
	}
	if e.inflight.Add(-1) == 0 {
		e.idle.Signal()
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestGCWaitsForVictimReadersWithoutPolling: a GC pass whose victim is
// being read waits for the read, parked on a channel, before it resets
// the zone (it slept in 20 µs steps and polled the count), then reclaims
// it.
func TestGCWaitsForVictimReadersWithoutPolling(t *testing.T) {
	cfg := smallConfig()
	cfg.GC.Disabled = true
	e := formatOpen(t, emuDevice(t, 16, "256K", ""), cfg)
	defer e.Close()
	// Two files written one after the other, the first removed: its
	// zones hold only garbage.
	for _, name := range []string{"a", "b"} {
		h, err := e.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.WriteAt(bytes.Repeat([]byte(name), 600<<10), 0); err != nil {
			t.Fatal(err)
		}
		if err := h.Sync(); err != nil {
			t.Fatal(err)
		}
		h.Close() // a removed file's data stays while it is open
	}
	if err := e.Remove("a"); err != nil {
		t.Fatal(err)
	}
	cands := e.gc.pick(gcUrgent, minGCGain)
	if len(cands) == 0 {
		t.Fatal("no GC victim")
	}
	victim := cands[0]
	resets := e.Stats().GCResets
	// The pass resets every empty full zone at once (resetEmpty).
	empty := len(emptyFullZones(e))
	victim.readers.Add(1) // a read in flight from it
	done := make(chan bool, 1)
	go func() { done <- e.gc.reclaim(nil, minGCGain) }()
	parkedIn(t, "engine.(*collector).pass", "engine.(*Engine).waitUntil")
	select {
	case <-done:
		t.Fatal("GC reset a zone with a read in flight")
	default:
	}
	if victim.readers.Add(-1) == 0 {
		e.idle.Signal()
	}
	if !<-done {
		t.Fatal("GC pass reclaimed nothing")
	}
	if got := e.Stats().GCResets; got != resets+int64(empty) {
		t.Fatalf("GC resets %d, want %d", got, resets+int64(empty))
	}
	if victim.state.Load() != zoneFree {
		t.Fatalf("victim zone %d is in state %d, want free", victim.idx, victim.state.Load())
	}
	checkValidCounts(t, e)
}
