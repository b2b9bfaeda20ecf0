package engine

import (
	"bytes"
	"testing"
	"time"
)

// TestGCBacksOffWhileWritesFail: on a device whose writes all fail, the
// background collector retried its pass without pause (a helper saw
// "engine: gc pass failed" ~8,000 times a second and a CPU spun). It
// must back off after a failed pass, and collect again once writes work.
func TestGCBacksOffWhileWritesFail(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	e := formatOpen(t, devName, smallConfig())
	defer e.Close()
	f, err := e.Create("a")
	if err != nil {
		t.Fatal(err)
	}
	// Make garbage until free zones are below the low watermark, with
	// the collector held so that it collects none of it yet.
	e.gc.mu.Lock()
	chunk := bytes.Repeat([]byte{3}, 256<<10)
	for i := 0; e.Stats().FreeZones >= e.cfg.GC.Low; i++ {
		if i > 200 {
			e.gc.mu.Unlock()
			t.Fatalf("free zones still %d after %d overwrites", e.Stats().FreeZones, i)
		}
		if _, err := f.WriteAt(chunk, int64(i%8)*int64(len(chunk))); err != nil {
			e.gc.mu.Unlock()
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			e.gc.mu.Unlock()
			t.Fatal(err)
		}
	}
	emu := emuOf(t, e)
	emu.FailWrites(true)
	before := e.Stats()
	e.gc.mu.Unlock()

	// Hang guard only: the first failed pass comes at once.
	guard := time.Now().Add(time.Minute)
	for e.Stats().GCFailed == before.GCFailed {
		if time.Now().After(guard) {
			t.Fatal("no GC pass failed within a minute")
		}
		time.Sleep(time.Millisecond)
	}
	// Wake the collector 200 times. Without backoff each wakeup ran a
	// pass, and each failed.
	const wakeups = 200
	for i := range wakeups {
		select {
		case e.gc.kick <- struct{}{}:
		case <-time.After(time.Minute):
			t.Fatalf("the collector took no kick within a minute (after %d)", i)
		}
	}
	if n := e.Stats().GCFailed - before.GCFailed; n >= 50 {
		t.Fatalf("%d GC passes failed over %d wakeups of failing writes: the collector does not back off", n, wakeups)
	}

	emu.FailWrites(false)
	for e.Stats().FreeZones < e.cfg.GC.Low || e.Stats().GCResets == before.GCResets {
		if time.Now().After(guard) {
			st := e.Stats()
			t.Fatalf("GC did not resume once writes worked: free zones %d (low %d), resets %d", st.FreeZones, e.cfg.GC.Low, st.GCResets-before.GCResets)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestGCBackoffDoublesToCap(t *testing.T) {
	var b gcBackoff
	now := time.Unix(1000, 0)
	want := gcBackoffMin
	for i := range 20 {
		b.failed(now)
		if b.wait != want {
			t.Fatalf("failure %d: wait %v, want %v", i+1, b.wait, want)
		}
		if !b.waiting(now.Add(want-1)) || b.waiting(now.Add(want)) {
			t.Fatalf("failure %d: waiting wrong around %v", i+1, want)
		}
		want = min(2*want, gcBackoffMax)
	}
	if b.wait != gcBackoffMax {
		t.Fatalf("wait after 20 failures %v, want the cap %v", b.wait, gcBackoffMax)
	}
}
