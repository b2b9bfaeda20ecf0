package zns

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Review of the lost-zone-table check (checkLostTable): a file zonefold
// itself began to format and a power cut tore is not refused; a damaged
// device whose data the check did not look at is.

// tornGeo is a device whose header slot spans five pages (1024 zones:
// 20 KiB), so a power cut during its first format can leave part of
// slot 1 on the media: 1024 zones of 64 KiB, left sparse.
const tornGeo = "?zone_size=64K&zones=1024"

// tornFirstFormat makes an emu file as a first format of params leaves
// it when a power cut tears its first table write: Open writes a new
// device's table to slot 1, syncs it, then to slot 0; the cut came
// during the write of slot 1, so slot 0 is still zeros and of slot 1
// only the ranges keep says (relative to the slot) reached the media.
func tornFirstFormat(t *testing.T, params string, keep ...[2]int64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dev")
	e, _ := openEmuT(t, path, params)
	slotLen := e.slotLen
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	slot1 := readAt(t, path, slotLen, slotLen)
	torn := make([]byte, slotLen)
	for _, k := range keep {
		copy(torn[k[0]:k[1]], slot1[k[0]:k[1]])
	}
	patchFile(t, path, 0, make([]byte, slotLen)) // slot 0: never written
	patchFile(t, path, slotLen, torn)
	return path
}

// readAt reads n bytes at off of the file at path.
func readAt(t *testing.T, path string, off, n int64) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestEmuOpenFormatsAfterATornFirstFormat(t *testing.T) {
	const page, slot = 4096, 20480
	for _, tc := range []struct {
		name, params string
		keep         [][2]int64
	}{
		{"all-but-the-crc-page", tornGeo, [][2]int64{{0, slot - page}}},
		{"first-sector-only", tornGeo, [][2]int64{{0, 512}}},
		{"all-but-the-first-page", tornGeo, [][2]int64{{page, slot}}},
		{"pages-out-of-order", tornGeo, [][2]int64{{page, 2 * page}, {3 * page, 4 * page}}},
		{"conventional-zones-strict-open", tornGeo + "&conv=3&strict_open=1", [][2]int64{{0, 2 * page}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tornFirstFormat(t, tc.params, tc.keep...)
			d, err := Open("emu:"+path+tc.params, Options{})
			if err != nil {
				t.Fatalf("Open after a power cut tore the first format (its zones hold nothing): %v", err)
			}
			e, c := d.(*Emu), newConf(t, d)
			for i := range e.Geometry().Zones {
				if z := c.zone(i); z.WP != z.Start || (z.Type == TypeSeqRequired) != (z.Cond == CondEmpty) {
					t.Fatalf("zone %d of the new device: %s %s, wp +%d", i, z.Type, z.Cond, z.WP-z.Start)
				}
			}
			c.ok("Close", e.Close())
			d, err = Open("emu:"+path, Options{Existing: true})
			if err != nil {
				t.Fatalf("reopen without the geometry: %v", err)
			}
			d.Close()
		})
	}
}

// What only looks like a torn first format is still refused: its zones
// hold data, a byte of the slot is not what a format writes, or the
// slot is not where a format of this geometry writes it. With no emu
// magic left in a slot (and no file system's signature), the file is
// refused as no device (noDevice), and still not written.
func TestEmuOpenRefusesWhatOnlyLooksLikeATornFirstFormat(t *testing.T) {
	const page, slot = 4096, 20480
	for _, tc := range []struct {
		name     string
		file     func(t *testing.T) string
		params   string
		want     string
		noDevice bool
	}{
		{"zones-hold-data", func(t *testing.T) string {
			p := tornFirstFormat(t, tornGeo, [2]int64{0, slot - page})
			patchFile(t, p, 1<<20+700*64<<10, []byte("data"))
			return p
		}, tornGeo, "zone 700", false},
		{"a-byte-unlike-the-format", func(t *testing.T) string {
			p := tornFirstFormat(t, tornGeo, [2]int64{0, slot - page})
			patchFile(t, p, slot+2*page+5, []byte{0x5a})
			return p
		}, tornGeo, "in the header", false},
		{"format-bytes-in-slot-0", func(t *testing.T) string {
			p := tornFirstFormat(t, tornGeo)
			full := tornFirstFormat(t, tornGeo, [2]int64{0, slot})
			patchFile(t, p, page, readAt(t, full, slot+page, page)) // slot 1's 2nd page, in slot 0
			return p
		}, tornGeo, "in the header", true},
		{"another-geometry", func(t *testing.T) string {
			// Its slot 1 is at 16 KiB: in slot 0 of tornGeo.
			return tornFirstFormat(t, "?zone_size=64K&zones=1000", [2]int64{0, 2 * page})
		}, tornGeo, "in the header", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.noDevice {
				err := refusedOpen(t, tc.file(t), tc.params, Options{})
				if errors.Is(err, ErrLostZoneTable) || !strings.Contains(err.Error(), "not an emu device") || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Open = %v, want a refusal as no emu device naming %q", err, tc.want)
				}
				return
			}
			err := refusedLostTable(t, tc.file(t), tc.params, tc.want)
			if strings.Contains(err.Error(), "slots read as zeros") {
				t.Errorf("the error says the header slots read as zeros, though slot 1 does not: %v", err)
			}
		})
	}
}

// A device whose zone table is lost is refused when the geometry given
// is smaller than the file's (its data lies past the zones given), and
// when the data of a conventional zone is not at its start on a file
// whose every block is allocated (written zeros, as dd leaves a
// pre-sized file, and as a file system without hole reporting shows
// every file).
func TestEmuOpenRefusesALostTableItDidNotLookAt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		file   func(t *testing.T) string
		params string
		want   string
	}{
		{"data-past-the-zones-given", lostTable(6), "?zone_size=1M&zones=4", "past the 4 zones"},
		{"data-past-the-zones-given-not-at-a-zone-start", func(t *testing.T) string {
			p := sparseFile(t, 9<<20)
			patchFile(t, p, 1<<20+6<<20+12288, testSignature) // where the file's data starts
			return p
		}, "?zone_size=1M&zones=4", "past the 4 zones"},
		{"conventional-zone-written-in-the-middle-of-zeros", func(t *testing.T) string {
			p := sparseFile(t, 0)
			patchFile(t, p, 0, make([]byte, 9<<20)) // every block allocated, zeros
			e, c := openEmuT(t, p, lostGeo+"&conv=2")
			c.write(1, 1<<20+256<<10, signed(c.buf(c.bs, 7))) // zone 1 at +256 KiB
			c.ok("Flush", e.Flush())
			c.ok("Close", e.Close())
			zeroSlots(t, p)
			return p
		}, lostGeo + "&conv=2", "zone 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refusedLostTable(t, tc.file(t), tc.params, tc.want)
		})
	}
}

// refusedLostTable opens the emu file at path with params, which must
// fail with ErrLostZoneTable naming want and leave the file as it was,
// and returns the error.
func refusedLostTable(t *testing.T, path, params, want string) error {
	t.Helper()
	before := fileDigest(t, path)
	d, err := Open("emu:"+path+params, Options{})
	if err == nil {
		d.Close()
		t.Fatal("Open of a device whose zone table is lost succeeded (wrote an empty table over it)")
	}
	if !errors.Is(err, ErrLostZoneTable) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Open = %v, want ErrLostZoneTable naming %q", err, want)
	}
	if fileDigest(t, path) != before {
		t.Fatal("the refused Open changed the file")
	}
	return err
}

// Without the geometry a file whose first page reads as zeros cannot be
// told blank or damaged: the error must not call a device that lost its
// table blank (it said "is blank (no device yet)"), and it writes
// nothing. An empty file is blank.
func TestEmuOpenWithoutGeometryDoesNotCallALostTableBlank(t *testing.T) {
	path := lostTable(0, 3)(t)
	before := fileDigest(t, path)
	d, err := Open("emu:"+path, Options{})
	if err == nil {
		d.Close()
		t.Fatal("Open without the geometry succeeded")
	}
	msg := err.Error()
	if strings.Contains(msg, "is blank") || !strings.Contains(msg, "lost") || !strings.Contains(msg, "zone_size") {
		t.Errorf("Open of a device whose table is lost, without the geometry: %q, want it not called blank, and lost and zone_size named", msg)
	}
	if fileDigest(t, path) != before {
		t.Fatal("the refused Open changed the file")
	}
	empty := sparseFile(t, 0)
	if _, err := Open("emu:"+empty, Options{}); err == nil || !strings.Contains(err.Error(), "is blank") {
		t.Errorf("Open of an empty file without the geometry: %v, want it called blank", err)
	}
}
