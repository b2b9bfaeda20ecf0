package engine

import (
	"bytes"
	"errors"
	"io/fs"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// TestUnnamedWhileOpenKeepsItsHandlesWorking: a file removed, or renamed
// over, while a handle has it open stays the handle's, as an unlinked
// file does on a kernel file system: its bytes read back (from the cache
// and, evicted, from the device, also after GC moved them), writes,
// fsync and truncate work, and a checkpoint meanwhile leaves it out. Its
// data stays valid until the last close, which makes it garbage. A
// restart, clean or after a power cut while it is open, has it gone
// (the namespace change was durable) and fsck clean. The handles used to
// fail with ENOENT at once.
func TestUnnamedWhileOpenKeepsItsHandlesWorking(t *testing.T) {
	for _, tc := range []struct {
		how   string
		crash bool
	}{
		{"remove", false}, {"remove", true},
		{"rename over", false}, {"rename over", true},
	} {
		name := tc.how
		if tc.crash {
			name += ", power cut while open"
		}
		t.Run(name, func(t *testing.T) {
			devName := memDevice(t, 24, "1M")
			e := formatOpen(t, devName, Config{CacheBytes: 4 << 20, MaxOrder: 4})
			old := bytes.Repeat([]byte("unnamed while open "), 20000) // ~370 KiB
			newer := bytes.Repeat([]byte{0x5a}, 100<<10)
			h := createSynced(t, e, "f", old)
			validWith := validBytes(e)

			switch tc.how {
			case "remove":
				if err := e.Remove("f"); err != nil {
					t.Fatal(err)
				}
			case "rename over":
				g := createSynced(t, e, "g", newer)
				if err := g.Close(); err != nil {
					t.Fatal(err)
				}
				if err := e.Rename("g", "f"); err != nil {
					t.Fatal(err)
				}
			}
			unnamedReads(t, h, old, "from the cache")
			e.cache.EvictClean(1 << 40)
			unnamedReads(t, h, old, "from the device")
			for range 4 {
				if _, err := e.gc.pass(gcUrgent); err != nil {
					t.Logf("gc pass: %v", err)
				}
			}
			e.cache.EvictClean(1 << 40)
			unnamedReads(t, h, old, "after GC passes")
			if _, err := h.Fstat(); err != nil {
				t.Errorf("fstat of the open handle: %v", err)
			}

			more := bytes.Repeat([]byte{0xa7}, 64<<10)
			if _, err := h.WriteAt(more, int64(len(old))); err != nil {
				t.Fatalf("write through the open handle: %v", err)
			}
			if err := h.Sync(); err != nil {
				t.Fatalf("fsync through the open handle: %v", err)
			}
			if err := h.Truncate(int64(len(old))); err != nil {
				t.Fatalf("truncate through the open handle: %v", err)
			}
			if err := e.checkpoint(); err != nil {
				t.Fatalf("checkpoint while the unnamed file is open: %v", err)
			}
			unnamedReads(t, h, old, "after its write, fsync, truncate and a checkpoint")
			if _, err := e.Stat("f"); tc.how == "remove" && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("stat f after its remove: %v, want fs.ErrNotExist", err)
			}
			if got := validBytes(e); got < validWith {
				t.Errorf("while open, the zones hold %d valid bytes, fewer than the %d they held with the file named: its data was dropped", got, validWith)
			}

			if tc.crash {
				emu := e.dev.(*zns.Emu)
				e.crashForTest()
				if err := emu.PowerCut(); err != nil {
					t.Fatal(err)
				}
				emu.Close()
			} else {
				if err := h.Close(); err != nil {
					t.Fatal(err)
				}
				want := validWith - int64(len(old))
				if tc.how == "rename over" {
					want += int64(len(newer))
				}
				if got := validBytes(e); got > want {
					t.Errorf("after the last close, the zones hold %d valid bytes, want at most %d: the unnamed file's data was not dropped", got, want)
				}
				e.idMu.RLock()
				n := len(e.byID)
				e.idMu.RUnlock()
				if want := map[string]int{"remove": 0, "rename over": 1}[tc.how]; n != want {
					t.Errorf("after the last close the engine knows %d files by id, want %d", n, want)
				}
				if err := e.Close(); err != nil {
					t.Fatal(err)
				}
			}
			unnamedReopen(t, devName, tc.how, newer)
		})
	}
}

// unnamedReads checks that h reads want, whole.
func unnamedReads(t *testing.T, h *File, want []byte, when string) {
	t.Helper()
	got := make([]byte, len(want))
	if n, err := h.ReadAt(got, 0); err != nil || n != len(want) || !bytes.Equal(got, want) {
		t.Fatalf("%s: the open handle read %d bytes (err %v), equal %v; want the file's %d bytes", when, n, err, bytes.Equal(got[:n], want[:n]), len(want))
	}
}

// validBytes is the valid bytes of every data zone.
func validBytes(e *Engine) int64 {
	var sum int64
	for _, z := range e.ZoneValidity() {
		sum += z.Valid
	}
	return sum
}

// unnamedReopen opens the device again and checks that only what the
// namespace durably holds is there: no f after a remove, f with the
// renamed file's bytes after a rename over it; fsck clean.
func unnamedReopen(t *testing.T, devName, how string, newer []byte) {
	t.Helper()
	checkFsck(t, devName)
	e, err := Open(devName, Config{CacheBytes: 4 << 20})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer e.Close()
	list := e.List()
	switch how {
	case "remove":
		if len(list) != 0 {
			t.Fatalf("after the restart: %v, want no file", list)
		}
	case "rename over":
		if len(list) != 1 || list[0].Name != "f" {
			t.Fatalf("after the restart: %v, want only f", list)
		}
		h, err := e.Open("f")
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		unnamedReads(t, h, newer, "f after the restart")
	}
}

// TestUnnamedRemoveRacingLastCloseDropsTheFile: a remove and the close of
// the file's last handle, racing, drop the file in every order: one of
// the two sees the other (unlink marks before it counts handles, Close
// counts off before it looks at the mark). A file neither dropped would
// keep its data valid, for GC to copy, until a restart.
func TestUnnamedRemoveRacingLastCloseDropsTheFile(t *testing.T) {
	e := formatOpen(t, memDevice(t, 16, "1M"), Config{CacheBytes: 4 << 20})
	defer e.Close()
	for i := range 500 {
		h, err := e.Create("f")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- e.RemoveDeferred("f") }()
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		e.idMu.RLock()
		n := len(e.byID)
		e.idMu.RUnlock()
		if n != 0 {
			t.Fatalf("round %d: after the remove and the last close, the engine still knows %d file(s) by id", i, n)
		}
	}
}

// TestCloseWritesNothingBackOfAnUnnamedFile: a file removed while open
// is gone at the restart whatever Close does (its remove was logged), so
// Close does not write back its dirty data: that would cost the device
// the bytes, and on a device that refuses them report acknowledged data
// lost for a file nobody can name.
func TestCloseWritesNothingBackOfAnUnnamedFile(t *testing.T) {
	devName := memDevice(t, 24, "1M")
	e := formatOpen(t, devName, Config{CacheBytes: 8 << 20})
	h, err := e.Create("f")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.WriteAt(bytes.Repeat([]byte{7}, 2<<20), 0); err != nil {
		t.Fatal(err)
	}
	if err := e.Remove("f"); err != nil {
		t.Fatal(err)
	}
	before := e.Stats().DevData
	if err := e.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if wrote := e.Stats().DevData - before; wrote != 0 {
		t.Errorf("close wrote back %d bytes of a file removed while open", wrote)
	}
	unnamedReopen(t, devName, "remove", nil)
}
