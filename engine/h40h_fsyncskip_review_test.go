package engine

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
)

// Review of 3e1d592 (an fsync with nothing new to flush runs no device
// flush): GC moving a file's extents around its fsync. GC's copies are
// records of the file (file.dataFlush): an fsync after a GC pass whose
// flush failed must flush (the copies the map points at are not
// durable), and one after a pass that flushed and reset the victim need
// not; either way the file survives a power cut whole, with its
// overwrite written back (not flushed) before the pass.
func TestH40hFsyncAroundGCRelocation(t *testing.T) {
	for _, failGCFlush := range []bool{false, true} {
		name := "gc flushed"
		if failGCFlush {
			name = "gc flush failed"
		}
		t.Run(name, func(t *testing.T) {
			// The test runs the pass itself: a background pass between
			// FailFlush and collect took the armed fault (CI, 2026-12-07).
			cfg := smallConfig()
			cfg.GC.Disabled = true
			d := &h40gDevice{t: t, devName: emuDevice(t, 16, "1M", ""), cfg: cfg}
			e := formatOpen(t, d.devName, d.cfg)
			const size = 100000
			names, open := fillWithFilesKept(t, e, size, true)
			var victim *zone
			for _, n := range names {
				if z := e.zoneAt(devOf(t, e, n, 0).dev); z.state.Load() == zoneFull && victim == nil {
					victim = z
				}
			}
			var gone, kept string
			var keptH *File
			for i, n := range names {
				x := devOf(t, e, n, 0)
				if e.zoneAt(x.dev) != victim || e.zoneAt(x.dev+x.len-1) != victim {
					continue
				}
				if gone == "" {
					gone = n
					open[i].Close()
					open[i] = nil
				} else if kept == "" {
					kept, keptH = n, open[i]
				}
			}
			if victim == nil || gone == "" || kept == "" {
				t.Fatal("set-up: no full zone with two files wholly in it")
			}
			if err := e.Remove(gone); err != nil {
				t.Fatal(err)
			}
			// kept's content: its fill byte, with a written-back (not
			// flushed) overwrite at 10.
			var idx int
			for i, n := range names {
				if n == kept {
					idx = i
				}
			}
			want := bytes.Repeat([]byte{byte(idx)}, size)
			copy(want[10:], "overwrite")
			if _, err := keptH.WriteAt([]byte("overwrite"), 10); err != nil {
				t.Fatal(err)
			}
			if err := e.wb.FlushFile(t.Context(), keptH.f.id); err != nil {
				t.Fatal(err)
			}
			if failGCFlush {
				emuOf(t, e).FailFlush(1)
			}
			_, err := collectVictim(e, victim)
			if x := devOf(t, e, kept, 0); e.zoneAt(x.dev) == victim {
				t.Fatalf("set-up: GC left %s in zone %d (%v)", kept, victim.idx, err)
			}
			if failGCFlush {
				if err == nil || !errors.Is(err, syscall.EIO) {
					t.Fatalf("collect with a failing flush: %v, want EIO", err)
				}
				h40gSync(t, e, keptH, -1, "a sync after GC's copies failed to flush")
			} else {
				if err != nil {
					t.Fatalf("collect: %v", err)
				}
				if _, err := e.gc.settle(true); err != nil {
					t.Fatalf("settle: %v", err)
				}
				h40gSync(t, e, keptH, 0, "a sync after GC flushed its copies")
			}
			for _, h := range open {
				if h != nil {
					h.Close()
				}
			}
			d.cutKeeps(e, kept, want)
		})
	}
}

// A truncate by another handle whose record has landed but whose flush
// has not run yet (held between its settle and its flush): an fsync of
// the file meanwhile covers it (metaLog.needFlush), so it flushes, and a
// power cut after it keeps the truncated size.
func TestH40hFsyncCoversAnotherHandlesPendingTruncate(t *testing.T) {
	d, e := h40gFormat(t)
	want := bytes.Repeat([]byte("t"), 3*BlockSize)
	a := h40gWritten(t, e, "x", want)
	h40gSync(t, e, a, -1, "the first sync")
	h40gSync(t, e, a, 0, "the second sync")
	b, err := e.Open("x")
	if err != nil {
		t.Fatal(err)
	}
	held, release := make(chan struct{}), make(chan struct{})
	first := true
	testHookAckFlush = func(*Engine) {
		if first {
			first = false
			close(held)
			<-release
		}
	}
	defer func() { testHookAckFlush = nil }()
	done := make(chan error, 1)
	go func() { done <- b.Truncate(BlockSize) }()
	<-held
	// Only this goroutine runs the hook from here on (b's waits).
	h40gSync(t, e, a, -1, "a sync while another handle's truncate waits for its flush")
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	a.Close()
	b.Close()
	d.cutKeeps(e, "x", want[:BlockSize])
}
