package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

// TestH42bGCResetsZonesOfHeldRemoves: files removed without a flush
// (RemoveDeferred; on a device of format 3 their records are held for a
// pack, not written) leave full zones of garbage that a writer short of
// space has GC reset: the reset's record carries the held removes
// (writeOp packs them with it) and its flush makes them durable before
// the zones are reset, so the writer gets its room, and after a power
// cut every removed file is gone (never back with its zone reset under
// it) while the file kept reads whole. Without GC (the cut comes first)
// the removed files come back whole. On both formats: format 2 writes
// each remove's record at once, unflushed.
func TestH42bGCResetsZonesOfHeldRemoves(t *testing.T) {
	for _, v := range []int{superMinVersion, superPackVersion} {
		for _, gc := range []bool{false, true} {
			t.Run(fmt.Sprintf("format%d/gc=%v", v, gc), func(t *testing.T) {
				h41bFormat(t, v)
				devName := emuDevice(t, 16, "256K", "")
				cfg := smallConfig()
				cfg.GC.Disabled = true // only the writer's GC: nothing runs unasked
				e := formatOpen(t, devName, cfg)
				zc := e.placer.zoneCap()
				// Synced files of a zone each (a record of a header and
				// the data) until the device refuses one.
				content := map[string][]byte{}
				var names []string
				for i := 0; ; i++ {
					n := fmt.Sprintf("t%02d", i)
					data := bytes.Repeat([]byte{byte(i + 1)}, int(zc-BlockSize))
					h, err := e.Create(n)
					if err != nil {
						t.Fatal(err)
					}
					_, err = h.WriteAt(data, 0)
					if err == nil {
						err = h.Sync()
					}
					h.Close()
					if err != nil {
						if !errors.Is(err, ErrNoSpace) {
							t.Fatalf("fill %s: %v", n, err)
						}
						if err := e.Remove(n); err != nil {
							t.Fatal(err)
						}
						break
					}
					content[n] = data
					names = append(names, n)
				}
				if len(names) < 6 {
					t.Fatalf("only %d files fit", len(names))
				}
				kept := names[len(names)-1]
				removed := names[:len(names)-1]
				// Created before the removes: a durable create logged
				// after them would carry them.
				h, err := e.Create("new")
				if err != nil {
					t.Fatal(err)
				}
				for _, n := range removed {
					if err := e.RemoveDeferred(n); err != nil {
						t.Fatal(err)
					}
				}
				if held := e.meta.pending.Load(); held != (v >= superPackVersion) {
					t.Fatalf("removes held for a pack: %v on format %d", held, v)
				}
				s0 := e.Stats()
				if gc {
					// More than the free zones hold: the room is the
					// removed files' zones.
					buf := bytes.Repeat([]byte{0xee}, 64<<10)
					for off := int64(0); off < int64(len(removed)-1)*zc; off += int64(len(buf)) {
						if _, err := h.WriteAt(buf, off); err != nil {
							t.Fatalf("write at %d, %d removed files' zones of garbage: %v (%v)", off, len(removed), err, e.ZoneValidity())
						}
					}
					resets := e.Stats().GCResets - s0.GCResets
					if resets == 0 {
						t.Fatalf("the writes took the removed files' zones without a GC reset: %v", e.ZoneValidity())
					}
					if e.meta.pending.Load() {
						t.Fatalf("%d zones reset with the removes that emptied them still held", resets)
					}
				}
				h.Close() // no flush
				h41bCrash(t, e)

				e = reopen(t, devName, cfg)
				defer e.Close()
				back := 0
				for _, n := range names {
					_, err := e.Stat(n)
					if errors.Is(err, fs.ErrNotExist) {
						if n == kept {
							t.Fatalf("%s, synced and never removed, is gone", n)
						}
						continue
					}
					if err != nil {
						t.Fatal(err)
					}
					if got := readAll(t, e, n); !bytes.Equal(got, content[n]) {
						t.Fatalf("%s reads %d bytes, not its %d synced ones", n, len(got), len(content[n]))
					}
					if n != kept {
						back++
					}
				}
				switch {
				case gc && back > 0:
					t.Fatalf("%d removed files came back after GC reset the zones they emptied", back)
				case !gc && back != len(removed):
					t.Fatalf("%d of %d removed files came back after a cut before any flush", back, len(removed))
				}
			})
		}
	}
}
