package engine

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestH46dReadShortOfMemoryGetsWritebackBelowBackground: a read that
// needs memory when every folio of the cache is dirty, with far less
// dirty data than the background threshold and none of it expired, is
// served once writeback cleans a folio: the cache's kick for memory
// (Config.OnPressure: "should flush something even below the background
// threshold when memory is short") makes the flusher write back.
//
// Found with fio through the daemon (--cache 16M): a freshly laid-out
// 32 MiB file, then rw=randrw bs=4k iodepth=1024: each random write
// dirtied a block of one of the layout's large folios, so the cache was
// all dirty folios holding 2 MiB of dirty data (background: 4 MiB), and
// every miss waited for the 5 s expiry: reads and writes completed at
// 80-250 a second, single I/Os took 11 s, and a Ctrl-C of fio took 16 s.
// The flusher treated the kick like its tick: below the background
// threshold, only expired data. Here expiry is an hour: before the fix
// the read waited for it.
func TestH46dReadShortOfMemoryGetsWritebackBelowBackground(t *testing.T) {
	cfg := Config{CacheBytes: 8 << 20}
	cfg.Writeback.Expire = time.Hour
	e := formatOpen(t, emuDevice(t, 16, "4M", ""), cfg)
	t.Cleanup(func() { e.Close() })
	h, err := e.Create("a")
	if err != nil {
		t.Fatal(err)
	}
	const size = 32 << 20
	chunk := bytes.Repeat([]byte{7}, 1<<20)
	for off := int64(0); off < size; off += int64(len(chunk)) {
		if _, err := h.WriteAt(chunk, off); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Sync(); err != nil {
		t.Fatal(err)
	}
	st := e.cache.Stats()
	if st.CachedBytes != st.ArenaBytes || st.DirtyBytes != 0 {
		t.Fatalf("after the synced layout: %d of %d arena bytes cached, %d dirty; want a full, clean cache", st.CachedBytes, st.ArenaBytes, st.DirtyBytes)
	}
	// Dirty one block of every folio the cache holds, and no more: a
	// write where nothing is cached would evict a clean folio for its
	// own and leave memory free.
	cf := e.cache.File(h.f.id)
	blk := make([]byte, BlockSize)
	dirtied := 0
	for off := int64(0); off < size; off += 64 << 10 {
		if !e.cache.TryRead(cf, off, blk) {
			continue
		}
		if _, err := h.WriteAt(bytes.Repeat([]byte{9}, BlockSize), off); err != nil {
			t.Fatal(err)
		}
		dirtied++
	}
	st = e.cache.Stats()
	if dirtied == 0 || st.DirtyBytes == 0 || st.DirtyBytes >= e.cache.BackgroundBytes() {
		t.Fatalf("dirtied %d blocks: %d dirty bytes, background %d; want some, below it", dirtied, st.DirtyBytes, e.cache.BackgroundBytes())
	}
	// Every folio is dirty now; a read of what is not cached needs memory.
	var missOff int64 = -1
	for off := int64(0); off < size; off += 64 << 10 {
		if !e.cache.TryRead(cf, off, blk) {
			missOff = off
			break
		}
	}
	if missOff < 0 {
		t.Fatal("the whole file is cached: no read needs memory")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := make([]byte, 64<<10)
	done := make(chan error, 1)
	go func() {
		_, err := h.ReadAtContext(ctx, got, missOff)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("read at %d: %v", missOff, err)
		}
	case <-time.After(30 * time.Second):
		st = e.cache.Stats()
		t.Fatalf("a read short of memory still waits after 30 s (dirty %d bytes, background %d, alloc waits %d, writeback %d bytes): the flusher does not write back for it below the background threshold", st.DirtyBytes, e.cache.BackgroundBytes(), st.AllocWaits, st.WritebackBytes)
	}
	if !bytes.Equal(got, bytes.Repeat([]byte{7}, len(got))) {
		t.Fatalf("read at %d: wrong data", missOff)
	}
}
