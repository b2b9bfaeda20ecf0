package engine

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// h34aOfflineWhileMapping writes a file and holds the completer at the
// completion of its data record's append (before the record is mapped,
// or after: mapped), while the zone it landed in goes offline and the
// offline watcher's work (findOffline, redirtyOffline) runs. Then it
// lets the completer go on and checks that the data the cache held was
// written again elsewhere: the file maps nothing in the offline zone
// once writeback has run, and reads whole with the cache emptied.
func h34aOfflineWhileMapping(t *testing.T, mapped bool) {
	var target atomic.Uint64
	held := make(chan *zone, 1)
	release := make(chan struct{})
	var once sync.Once
	testHookMapRecord = func(_ *Engine, op *recordOp, after bool) {
		if id := target.Load(); id == 0 || op.f.id != id || op.gc != nil || after != mapped {
			return
		}
		once.Do(func() { held <- op.z; <-release })
	}
	t.Cleanup(func() { testHookMapRecord = nil })
	devName := emuDevice(t, 16, "1M", "&max_open=4&max_active=4")
	e := formatOpen(t, devName, smallConfig())
	defer func() { _ = e.Close() }()
	h, err := e.Create("a")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	data := bytes.Repeat([]byte("written once "), 5000)
	if _, err := h.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	target.Store(h.f.id)
	synced := make(chan error, 1)
	go func() { synced <- h.Sync() }()
	z := <-held
	// The append landed; before its flush ends, the zone goes offline
	// and the engine finds it (as the watcher does on a failed read).
	if err := emuOf(t, e).ZoneOffline(z.idx); err != nil {
		t.Fatal(err)
	}
	found := e.findOffline()
	if len(found) != 1 || found[0] != z {
		t.Fatalf("findOffline found %d zones, want zone %d", len(found), z.idx)
	}
	e.offlineOwed.Store(true)
	e.redirtyOffline(found)
	close(release)
	<-synced // nil: the append succeeded
	inZone := func() int64 {
		var n int64
		h.f.mu.RLock()
		h.f.ext.each(func(x extent) bool {
			if e.zoneAt(x.dev) == z {
				n += x.len
			}
			return true
		})
		h.f.mu.RUnlock()
		return n
	}
	// Writeback of what was redirtied may fail once (placement may pick
	// the offline zone, which retires it); fsync until nothing is left
	// there. The deadline only bounds a failure.
	for deadline := time.Now().Add(20 * time.Second); inZone() > 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		_ = h.Sync()
	}
	if n := inZone(); n > 0 {
		t.Fatalf("a still maps %d bytes in offline zone %d after writeback: the cache held them and nothing wrote them again", n, z.idx)
	}
	e.cache.EvictClean(1 << 40)
	if got := readAll(t, e, "a"); !bytes.Equal(got, data) {
		t.Fatal("a reads other bytes than it held")
	}
}

// TestOfflineZoneFoundBetweenMapAndWritebackEndIsWrittenAgain: the zone
// goes offline after the append's record is mapped there and before the
// flush ends its writeback. The watcher's Redirty found the blocks dirty
// (under writeback) and left them; the writeback's end made them clean,
// mapped in the offline zone.
func TestOfflineZoneFoundBetweenMapAndWritebackEndIsWrittenAgain(t *testing.T) {
	h34aOfflineWhileMapping(t, true)
}

// TestOfflineZoneFoundBeforeTheRecordIsMappedIsWrittenAgain: the zone
// goes offline after the append landed and before the completer maps
// the record. The watcher's list of what files map there missed it, and
// the completer then mapped it into the offline zone.
func TestOfflineZoneFoundBeforeTheRecordIsMappedIsWrittenAgain(t *testing.T) {
	h34aOfflineWhileMapping(t, false)
}
