package engine

import (
	"bytes"
	"context"
	"testing"
)

// TestH36bFailedFlushRewritesLandedRecords: a flush whose records land
// in part and then fail (an append's EIO) leaves all its data dirty,
// the records that landed too: they stay mapped on the device (valid,
// their room taken) and count again as dirty, so admission counts them
// twice until the retry. That is the room the retry takes: it appends
// every dirty byte again (the landed copies become garbage), so the
// double count must stay while the retry rewrites them. Here a's 512
// KiB go back in several records; the second append fails; the first
// landed; a's fsync then fails once, the next one succeeds, a reads
// back whole and maps only the retry's copies.
func TestH36bFailedFlushRewritesLandedRecords(t *testing.T) {
	cfg := Config{CacheBytes: 8 << 20, DirtyLimit: 4 << 20, FinishTail: -1}
	cfg.GC.Disabled = true
	e := formatOpen(t, emuDevice(t, 16, "256K", ""), cfg)
	defer e.Close()
	emu := emuOf(t, e)
	a := mustCreate(t, e, "a")
	data := bytes.Repeat([]byte{'a'}, 512<<10)
	if _, err := a.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if max := e.maxRecordData(); max >= int64(len(data))/2 {
		t.Fatalf("records of %d bytes: the test wants a's data in more than two", max)
	}
	spaceBefore, dirtyBefore := e.placer.space(), e.cache.DirtyBytes()
	emu.FailWrite(2)
	if err := e.wb.FlushFile(context.Background(), a.f.id); err == nil {
		t.Fatal("flush with its second append failing succeeded")
	}
	var landed int64
	a.f.mu.RLock()
	a.f.ext.each(func(x extent) bool { landed += x.len; return true })
	a.f.mu.RUnlock()
	dirty := e.cache.DirtyBytes()
	t.Logf("failed flush: %d of %d bytes landed and mapped; dirty %d (before %d); space %d (before %d)",
		landed, len(data), dirty, dirtyBefore, e.placer.space(), spaceBefore)
	if landed == 0 {
		t.Fatal("nothing of the failed flush landed: the test wants a partly landed one")
	}
	if dirty != dirtyBefore {
		t.Fatalf("dirty %d after the failed flush, want all %d: the retry rewrites what landed", dirty, dirtyBefore)
	}
	if got := spaceBefore - e.placer.space(); got < landed {
		t.Fatalf("space fell %d, less than the %d bytes that landed", got, landed)
	}
	if err := a.Sync(); err == nil {
		t.Fatal("fsync after the failed flush reported no error")
	}
	if err := a.Sync(); err != nil {
		t.Fatalf("second fsync: %v", err)
	}
	if got := readAll(t, e, "a"); !bytes.Equal(got, data) {
		t.Fatalf("a reads back %d bytes, not its %d", len(got), len(data))
	}
	if v := e.placer.validBytes(); v != int64(len(data)) {
		t.Fatalf("valid bytes %d after the retry, want %d: the landed copies are garbage now", v, len(data))
	}
}
