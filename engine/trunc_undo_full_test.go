package engine

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
)

// A failed truncate's undo (undoCut -> rewritePiece) puts back bytes the
// file held (acknowledged, synced); it must not be refused ENOSPC for the
// cost of its room (admitGain), or the zeros' record is durable without
// the put-back records and a crash brings the file back with a hole
// although the truncate reported the file as it was. Near full, with
// garbage only a sliver of each zone.
func TestTruncateUndoNearFullIsNotRefused(t *testing.T) {
	for seed := range 3 {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { testTruncateUndoNearFull(t, uint64(seed)) })
	}
}

func testTruncateUndoNearFull(t *testing.T, seed uint64) {
	const (
		files = 4
		fill  = 64 << 10
		bs    = BlockSize
	)
	devName := emuDevice(t, 20, "4M", "")
	cfg := Config{CacheBytes: 4 << 20, DirtyLimit: 1 << 20, Policy: PolicyNone}
	cfg.GC.Disabled = true
	e := formatOpen(t, devName, cfg)
	defer func() { e.Close() }()
	want := make([]byte, 300<<10)
	for i := range want {
		want[i] = byte(i%251 + 1)
	}
	a := mustCreate(t, e, "a")
	if _, err := a.WriteAt(want, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(); err != nil {
		t.Fatal(err)
	}
	usable := e.Capacity() - int64(e.cfg.GC.Reserve)*e.geo.ZoneCap
	per := int64(0.97*float64(usable)) / files / fill * fill
	buf := make([]byte, fill)
	handles := make([]*File, files)
	for i := range handles {
		handles[i] = mustCreate(t, e, fmt.Sprint(i))
		for off := int64(0); off < per; off += fill {
			if _, err := handles[i].WriteAt(buf, off); err != nil {
				t.Fatalf("fill %d at %d: %v", i, off, err)
			}
		}
		if err := handles[i].Sync(); err != nil {
			t.Fatal(err)
		}
	}
	// Overwrite 4 KiB blocks until less than 200 KiB of room is left:
	// garbage is then a sliver of each zone.
	rng := rand.New(rand.NewPCG(27, seed))
	blk := make([]byte, bs)
	n := 0
	for e.roomFor(64 << 10) {
		h := handles[rng.IntN(files)]
		if _, err := h.WriteAt(blk, rng.Int64N(per/bs)*bs); err != nil {
			t.Fatalf("overwrite %d: %v", n, err)
		}
		n++
		{
			if err := h.Sync(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, h := range handles {
		if err := h.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d overwrites; room for 16K %v; admitGain %d", n, e.roomFor(16<<10), e.admitGain())
	if !e.roomFor(16 << 10) {
		t.Fatal("no room for the truncate's tail: adjust the test")
	}
	t.Logf("room for 300K %v, 100K %v; victims at admitGain %d, at minGCGain %d", e.roomFor(300<<10), e.roomFor(100<<10), len(e.gc.pick(gcUrgent, e.admitGain())), len(e.gc.pick(gcUrgent, minGCGain)))
	st0 := e.Stats()
	armed, fired := false, false
	testHookTruncateTail = func(*Engine) { armed = true }
	testHookNumbered = func(e *Engine, f *file) {
		if armed && !fired && f == a.f {
			fired = true
			emuOf(t, e).FailFlush(1)
		}
	}
	defer func() { testHookTruncateTail, testHookNumbered = nil, nil }()
	err := a.Truncate(5000)
	testHookTruncateTail, testHookNumbered = nil, nil
	t.Logf("truncate: %v; stats delta %+v", err, e.Stats().Sub(st0))
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("truncate: %v, want EIO", err)
	}
	if errors.Is(err, syscall.ENOSPC) {
		t.Errorf("the undo was refused ENOSPC: it puts back acknowledged bytes")
	}
	sameBytes(t, "after the failed truncate", readAll(t, e, "a"), want)
	e.crashForTest()
	emuOf(t, e).Close()
	e = reopen(t, devName, cfg)
	got := readAll(t, e, "a")
	if !bytes.Equal(got, want) {
		t.Errorf("after a crash: %d bytes, want the %d acknowledged ones", len(got), len(want))
	}
	sameBytes(t, "after the failed truncate and a crash", got, want)
}
