package zns

import (
	"bytes"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An emu file whose two header slots hold garbage (a stray dd over its
// start, bit rot that fails both slots' checksums), not zeros, but
// whose zones hold a file system is a device that lost its zone table,
// as one whose slots read as zeros: Open refuses it with
// ErrLostZoneTable and the ways on (fsck --copy-to, format --force),
// InferLostTable salvages it and ReplaceLostTable starts it over. It
// was refused as "not an emu device (format=1 overwrites it)", or
// "both header slots are damaged (format=1 erases the device and
// starts over)": the one way on it named erased the data, and the
// salvage refused it. A file that is no device at all (nothing of an
// emu header in it, nothing a file system writes at a zone start) is
// refused as that, whatever the options, and never written.

// testSignature stands in, in zns's tests, for what a file system
// writes at a zone start (the engine's superblock, which the engine
// registers; zns cannot import it).
var testSignature = []byte("zns test signature block\x00")

func init() {
	RegisterDataSignature(DataSignature{
		Name:  "a zns test signature",
		Zones: 4,
		Match: func(b []byte) bool { return bytes.HasPrefix(b, testSignature) },
	})
}

// garbageDevice is a device of lostGeo (8 zones of 1 MiB, capacity
// 768 KiB) with a block that starts with testSignature at the start of
// zone sig (none if -1) and a block of data in zone 3, flushed: its
// path and that data.
func garbageDevice(t *testing.T, sig int) (string, []byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dev")
	e, c := openEmuT(t, path, lostGeo)
	if sig >= 0 {
		b := c.buf(c.bs, 9)
		copy(b, testSignature)
		c.append(sig, b)
	}
	data := c.buf(2*c.bs, 3)
	c.append(3, data)
	c.ok("Flush", e.Flush())
	c.ok("Close", e.Close())
	return path, bytes.Clone(data)
}

// randomBytes are n random bytes, none of them the emu magic's first.
func randomBytes(seed int64, n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	if b[0] == emuMagic[0] {
		b[0]++
	}
	return b
}

func TestEmuGarbageHeaderIsALostTable(t *testing.T) {
	slotLen := emuSlotLen(8)
	for _, tc := range []struct {
		name   string
		sig    int // where the signature is: -1 none
		damage func(t *testing.T, path string)
		// zone0 is zone 0's inferred write pointer: where its data ends.
		zone0 int64
	}{
		{"random-over-both-slots", 0, func(t *testing.T, path string) {
			patchFile(t, path, 0, randomBytes(1, int(2*slotLen)))
		}, 4096},
		{"random-over-the-header-and-zone-0", 1, func(t *testing.T, path string) {
			// A dd of 1.5 MiB: the header and zone 0's start.
			patchFile(t, path, 0, randomBytes(2, 3<<19))
		}, 512 << 10},
		{"both-slots-fail-their-checksums", -1, func(t *testing.T, path string) {
			// Bit rot in a zone entry of each: the magic and geometry
			// still read.
			for _, off := range []int64{emuHdrFixed + 3, slotLen + emuHdrFixed + 3} {
				b := make([]byte, 1)
				f, err := os.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				_, err = f.ReadAt(b, off)
				f.Close()
				if err != nil {
					t.Fatal(err)
				}
				patchFile(t, path, off, []byte{b[0] ^ 0x10})
			}
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, data := garbageDevice(t, tc.sig)
			tc.damage(t, path)
			digest := fileDigest(t, path)
			for _, opts := range []Options{{}, {Existing: true}} {
				_, err := Open("emu:"+path+lostGeo, opts)
				if !errors.Is(err, ErrLostZoneTable) {
					t.Fatalf("Open(%+v): %v, want ErrLostZoneTable", opts, err)
				}
				for _, want := range []string{path, "`zonefold fsck DEVICE --copy-to DIR`", "`zonefold format --force DEVICE`", "nothing was written"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("Open(%+v): %q does not say %q", opts, err, want)
					}
				}
				if strings.Contains(err.Error(), "format=1") || strings.Contains(err.Error(), "reads as zeros") {
					t.Errorf("Open(%+v): %q names format=1, or zeros it did not read", opts, err)
				}
			}
			// Without the geometry: the table is lost all the same.
			// Without the geometry: a magic that still reads says the
			// table is lost; else no zone start tells.
			_, err := Open("emu:"+path, Options{})
			if err == nil || !strings.Contains(err.Error(), "zone_size and zones") || errors.Is(err, ErrLostZoneTable) != (tc.sig < 0) {
				t.Errorf("Open without the geometry: %v, want a refusal asking for zone_size and zones (ErrLostZoneTable: %v)", err, tc.sig < 0)
			}
			if got := fileDigest(t, path); got != digest {
				t.Fatal("a refused Open changed the file")
			}

			e, c := openEmuWith(t, path, Options{Existing: true, InferLostTable: true})
			if !e.InferredZoneTable() {
				t.Error("InferredZoneTable is false")
			}
			if z := c.zone(0); z.WP-z.Start != tc.zone0 {
				t.Errorf("zone 0 inferred at +%d, want +%d", z.WP-z.Start, tc.zone0)
			}
			if z := c.zone(3); z.WP-z.Start != int64(len(data)) || !bytes.Equal(c.read(z.Start, int64(len(data))), data) {
				t.Errorf("zone 3 inferred at +%d, want its %d bytes of data", z.WP-z.Start, len(data))
			}
			c.ok("Close", e.Close())
			if got := fileDigest(t, path); got != digest {
				t.Fatal("the inferred Open changed the file")
			}

			e, c = openEmuWith(t, path, Options{ReplaceLostTable: true})
			for i := range 8 {
				if z := c.zone(i); z.WP != z.Start || z.Cond != CondEmpty {
					t.Errorf("zone %d of the device started over: %s at +%d", i, z.Cond, z.WP-z.Start)
				}
			}
			c.ok("Close", e.Close())
			e, _ = openEmuWith(t, path, Options{Existing: true})
			e.Close()
		})
	}
}

// A file that is no emu device (random bytes; text) is refused with an
// error that says so, whatever Open is told (a salvage, a start over,
// an existing device), and is not written: not grown, not formatted.
func TestEmuRefusesAFileThatIsNoDevice(t *testing.T) {
	dir := t.TempDir()
	files := map[string][]byte{
		"random-of-the-geometry's-size": randomBytes(3, 9<<20),
		"random-smaller":                randomBytes(4, 3<<20),
		"text":                          bytes.Repeat([]byte("not a zoned device at all\n"), 100<<10),
	}
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, content, 0o644); err != nil {
			t.Fatal(err)
		}
		digest := fileDigest(t, path)
		for _, params := range []string{lostGeo, ""} {
			for _, opts := range []Options{{}, {Existing: true}, {ReplaceLostTable: true}, {Existing: true, InferLostTable: true}} {
				d, err := Open("emu:"+path+params, opts)
				if err == nil {
					d.Close()
					t.Errorf("%s%s, %+v: opened", name, params, opts)
					continue
				}
				if errors.Is(err, ErrLostZoneTable) || !strings.Contains(err.Error(), "not an emu device") || !strings.Contains(err.Error(), "nothing was written") {
					t.Errorf("%s%s, %+v: %v; want a refusal saying it is not an emu device, nothing written", name, params, opts, err)
				}
			}
		}
		if got := fileDigest(t, path); got != digest {
			t.Errorf("%s: a refused Open changed the file", name)
		}
	}
}
