package engine

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// h39cImage formats an emu device, writes "a" (128 KiB) and takes a
// checkpoint, then, after it, overwrites a's first 64 KiB (fsynced) and
// runs after (a namespace operation to log), and crashes. It returns the
// device (one more file, "z", written and fsynced last), the image path, the device offset of the overwrite's record
// header, and a's acknowledged bytes.
func h39cImage(t *testing.T, after func(e *Engine)) (devName, path string, hdrAt int64, want []byte) {
	t.Helper()
	devName, path, e, want := h39cOverwritten(t)
	if after != nil {
		after(e)
	}
	// One flush more: the emu takes a zone back to the flush before
	// when the data its last flush claimed fails its checksum (a cut
	// during that flush), which would hide the damage below.
	createSynced(t, e, "z", pattern(8<<10, 5)).Close()
	emu := emuOf(t, e)
	hdrAt = emu.FileOffset(devOf(t, e, "a", 0).hdr)
	e.crashForTest()
	if err := emu.PowerCut(); err != nil {
		t.Fatal(err)
	}
	emu.Close()
	return devName, path, hdrAt, want
}

// h39cOverwritten formats an emu device, writes "a" (128 KiB) and takes
// a checkpoint, then overwrites a's first 64 KiB and fsyncs it. It
// returns the device, its image's path, the engine still open, and a's
// acknowledged bytes.
func h39cOverwritten(t *testing.T) (devName, path string, e *Engine, want []byte) {
	t.Helper()
	devName = emuDevice(t, 16, "1M", "")
	path = strings.TrimPrefix(devName, "emu:")
	path = path[:strings.IndexByte(path, '?')]
	e = formatOpen(t, devName, smallConfig())
	want = pattern(128<<10, 1)
	createSynced(t, e, "a", want).Close()
	if err := e.checkpoint(); err != nil {
		t.Fatal(err)
	}
	h, err := e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	over := pattern(64<<10, 9)
	if _, err := h.WriteAt(over, 0); err != nil {
		t.Fatal(err)
	}
	if err := h.Sync(); err != nil {
		t.Fatal(err)
	}
	h.Close()
	copy(want, over)
	return devName, path, e, want
}

func h39cPatch(t *testing.T, path string, at int64, fn func(b []byte)) {
	t.Helper()
	img, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fn(img[at : at+BlockSize])
	if err := os.WriteFile(path, img, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestH39cDamagedHeaderNewerThanCheckpointRefusesOpen: one bit of the
// header of a record newer than the checkpoint (an fsynced overwrite)
// flips at rest. Recovery took it for a torn write that ends its zone's
// log and opened, serving the overwritten, older bytes in place of the
// acknowledged ones, and fsck said the device was clean. A header below
// the write pointer was written whole, so that is damage, and which
// file's bytes it held is lost with it: Open refuses, naming the zone,
// and fsck reports it.
func TestH39cDamagedHeaderNewerThanCheckpointRefusesOpen(t *testing.T) {
	devName, path, hdrAt, want := h39cImage(t, nil)
	h39cPatch(t, path, hdrAt, func(b []byte) { b[100] ^= 0x10 })

	rep := fsckOf(t, devName)
	if len(rep.Problems) == 0 {
		t.Error("fsck reports no damage")
	}
	e, err := Open(devName, smallConfig())
	if err == nil {
		got := readAll(t, e, "a")
		e.Close()
		t.Fatalf("Open of a device whose newest record's header is damaged succeeded; a reads back the acknowledged bytes: %v", bytes.Equal(got, want))
	}
	if !strings.Contains(err.Error(), "data zone") || !strings.Contains(err.Error(), "fails its checksum") {
		t.Fatalf("Open's refusal does not say what is damaged: %v", err)
	}
}

// TestH39cDamagedLogRecordIsReported: the record of a remove logged
// after the newest checkpoint is zeroed at rest. Recovery ends the log
// there (a design limit: it cannot tell damage from a failed write that
// was never acknowledged), so the removed file is back; but fsck said
// the device was clean. It reports the cut log now.
func TestH39cDamagedLogRecordIsReported(t *testing.T) {
	var opAt int64
	devName, path, _, _ := h39cImage(t, func(e *Engine) {
		createSynced(t, e, "b", pattern(8<<10, 3)).Close()
		e.meta.mu.Lock()
		h, wp := e.meta.active, e.meta.wp
		e.meta.mu.Unlock()
		if err := e.Remove("b"); err != nil {
			t.Fatal(err)
		}
		z, zoff := e.sb.metaAt(h, wp)
		opAt = emuOf(t, e).FileOffset(int64(z)*e.geo.ZoneSize + zoff)
	})
	h39cPatch(t, path, opAt, func(b []byte) { clear(b) })
	rep := fsckOf(t, devName)
	if len(rep.Problems) == 0 {
		t.Fatal("fsck reports no damage in a log cut short by a zeroed record")
	}
	t.Logf("fsck: %v", rep.Problems)
}

// TestH39cAcceptDamagedRecordsOpensPastIt: with the header of a record
// newer than the checkpoint damaged, Config.AcceptDamagedRecords opens
// the device: that record's range of "a" reads as it was before the
// overwrite (the loss the user accepted), every other byte as
// acknowledged, fsck with the option names the damage, and the next Open
// needs no option (recovery's checkpoint recorded the choice).
func TestH39cAcceptDamagedRecordsOpensPastIt(t *testing.T) {
	old := pattern(128<<10, 1)
	var zWant []byte
	// A second overwrite of a, after the damaged record in its zone
	// (a file's appends go to its zone): recovery goes on to it.
	more := pattern(32<<10, 7)
	devName, path, hdrAt, want := h39cImage(t, func(e *Engine) {
		h, err := e.Open("a")
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		if _, err := h.WriteAt(more, 64<<10); err != nil {
			t.Fatal(err)
		}
		if err := h.Sync(); err != nil {
			t.Fatal(err)
		}
		if x, y := devOf(t, e, "a", 0), devOf(t, e, "a", 64<<10); x.hdr/e.geo.ZoneSize != y.hdr/e.geo.ZoneSize || y.hdr < x.hdr {
			t.Fatalf("set-up: the second overwrite's record (%d) is not after the first's (%d) in its zone", y.hdr, x.hdr)
		}
	})
	copy(want[64<<10:], more)
	zWant = pattern(8<<10, 5)
	h39cPatch(t, path, hdrAt, func(b []byte) { b[200] ^= 0x01 })

	rep := fsckOfWith(t, devName, FsckOptions{AcceptDamagedRecords: true})
	named := false
	for _, p := range rep.Problems {
		named = named || strings.Contains(p, "accepted: data zone")
	}
	if !named {
		t.Errorf("fsck --accept-damaged-records does not name the damaged record: %v", rep.Problems)
	}
	if _, err := Open(devName, smallConfig()); err == nil || !strings.Contains(err.Error(), "--accept-damaged-records") {
		t.Fatalf("Open without the option: %v; want a refusal that names --accept-damaged-records", err)
	}
	cfg := smallConfig()
	cfg.AcceptDamagedRecords = true
	e, err := Open(devName, cfg)
	if err != nil {
		t.Fatalf("Open accepting damaged records: %v", err)
	}
	check := func(e *Engine) {
		t.Helper()
		got := readAll(t, e, "a")
		if len(got) != len(want) {
			t.Fatalf("a has %d bytes, want %d", len(got), len(want))
		}
		for off := 0; off < len(got); off += BlockSize {
			b := got[off : off+BlockSize]
			if !bytes.Equal(b, want[off:off+BlockSize]) && !bytes.Equal(b, old[off:off+BlockSize]) {
				t.Fatalf("a at %d reads neither the acknowledged bytes nor those before the damaged record", off)
			}
		}
		if !bytes.Equal(got[64<<10:], want[64<<10:]) {
			t.Fatal("a's bytes outside the damaged record differ")
		}
		if got := readAll(t, e, "z"); !bytes.Equal(got, zWant) {
			t.Fatal("z, written after the damaged record, differs")
		}
	}
	check(e)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e, err = Open(devName, smallConfig())
	if err != nil {
		t.Fatalf("second Open, without the option: %v", err)
	}
	check(e)
	e.Close()
}
