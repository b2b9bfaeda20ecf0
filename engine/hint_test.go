package engine

import (
	"bytes"
	"fmt"
	"testing"
)

func TestWriteLifeNames(t *testing.T) {
	for l := LifeNotSet; l < numLives; l++ {
		got, err := ParseWriteLife(l.String())
		if err != nil || got != l {
			t.Fatalf("ParseWriteLife(%q) = %v, %v", l.String(), got, err)
		}
	}
	if _, err := ParseWriteLife("forever"); err == nil {
		t.Fatal("an unknown class parsed")
	}
	if p, err := ParsePolicy("hinted"); err != nil || p != PolicyHinted {
		t.Fatalf("ParsePolicy(hinted) = %v, %v", p, err)
	}
}

func TestHintedPlacementSharesAZonePerClass(t *testing.T) {
	const zoneCap = 64 * BlockSize
	p := newTestPlacer(PolicyHinted, 10, 4, 1, zoneCap)
	files := make([]*file, 6)
	for i := range files {
		files[i] = &file{id: uint64(i + 1)}
	}
	// Files 0-2 are short-lived, 3-4 long-lived, 5 has no hint.
	for i, l := range []WriteLife{LifeShort, LifeShort, LifeShort, LifeLong, LifeLong, LifeNotSet} {
		files[i].life.Store(uint32(l))
	}
	zoneOf := map[int]*zone{}
	for round := 0; round < 3; round++ {
		for i, f := range files {
			z := take(t, p, p.stream(f), 2*BlockSize)
			if prev, ok := zoneOf[i]; ok && prev != z {
				t.Fatalf("file %d moved from zone %d to %d with room left", i, prev.idx, z.idx)
			}
			zoneOf[i] = z
		}
	}
	if zoneOf[0] != zoneOf[1] || zoneOf[1] != zoneOf[2] {
		t.Fatalf("short-lived files in zones %d, %d, %d: want one", zoneOf[0].idx, zoneOf[1].idx, zoneOf[2].idx)
	}
	if zoneOf[3] != zoneOf[4] {
		t.Fatalf("long-lived files in zones %d and %d: want one", zoneOf[3].idx, zoneOf[4].idx)
	}
	if zoneOf[0] == zoneOf[3] || zoneOf[5] == zoneOf[0] || zoneOf[5] == zoneOf[3] {
		t.Fatal("classes (or the unhinted file) share a zone while the budget allows one each")
	}
	// Under mru the same hints change nothing: each file has its own zone
	// while the budget lasts.
	p = newTestPlacer(PolicyMRU, 10, 4, 1, zoneCap)
	if p.stream(files[0]) != &files[0].mru {
		t.Fatal("mru placement follows the hint")
	}
}

// TestHintedPlacementSeparatesClasses writes more files than there are
// open zones, two classes interleaved: under hinted every zone holds one
// class only; under mru the files beyond the budget share whatever zone
// was used least recently, and classes mix.
func TestHintedPlacementSeparatesClasses(t *testing.T) {
	for _, pol := range []Policy{PolicyHinted, PolicyMRU} {
		t.Run(pol.String(), func(t *testing.T) {
			devName := emuDevice(t, 24, "1M", "")
			cfg := smallConfig()
			cfg.Policy, cfg.OpenZones = pol, 3
			e := formatOpen(t, devName, cfg)
			defer e.Close()
			const files = 8
			class := func(i int) WriteLife { return LifeShort + WriteLife(i%2)*(LifeExtreme-LifeShort) }
			hs := make([]*File, files)
			for i := range hs {
				h, err := e.Create(fmt.Sprintf("f%d", i))
				if err != nil {
					t.Fatal(err)
				}
				if err := h.SetWriteLife(class(i)); err != nil {
					t.Fatal(err)
				}
				hs[i] = h
			}
			chunk := bytes.Repeat([]byte{1}, 16<<10)
			for round := 0; round < 4; round++ {
				for i, h := range hs {
					if _, err := h.WriteAt(chunk, int64(round*len(chunk))); err != nil {
						t.Fatal(err)
					}
					// One record per file per round, interleaved.
					if err := h.Sync(); err != nil {
						t.Fatalf("sync f%d: %v", i, err)
					}
				}
			}
			mixed := 0
			classesIn := map[int]map[WriteLife]bool{}
			for i := range hs {
				e.nsMu.RLock()
				f := e.byName[fmt.Sprintf("f%d", i)]
				e.nsMu.RUnlock()
				f.mu.RLock()
				f.ext.each(func(x extent) bool {
					z := e.zoneAt(x.dev).idx
					if classesIn[z] == nil {
						classesIn[z] = map[WriteLife]bool{}
					}
					classesIn[z][class(i)] = true
					return true
				})
				f.mu.RUnlock()
			}
			for _, cs := range classesIn {
				if len(cs) > 1 {
					mixed++
				}
			}
			t.Logf("%s: %d zones used, %d hold both classes", pol, len(classesIn), mixed)
			if pol == PolicyHinted && mixed != 0 {
				t.Fatalf("hinted: %d zones hold both classes", mixed)
			}
			if pol == PolicyMRU && mixed == 0 {
				t.Fatal("mru kept the classes apart with more files than open zones: the hinted test proves nothing")
			}
		})
	}
}
