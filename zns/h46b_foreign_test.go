package zns

import (
	"errors"
	"strings"
	"testing"
)

// An emu file whose first page reads as zeros but that holds data
// further on was taken for a device that lost its zone table
// (ErrLostZoneTable), whatever the data: a disk image whose first 4 KiB
// are zeros, a tarball written at an offset, a sparse VM image. The
// refusal then named `zonefold fsck --copy-to` (a salvage of a file
// system that is not there) and `zonefold format --force`
// (ReplaceLostTable), which wrote an emu device over it. Such a file
// holds nothing of a device: no emu magic in a slot, no registered
// DataSignature at a zone start or where its data starts. It is
// refused as no device, whatever the options, and never written, as a
// file whose slots hold garbage is (checkDamagedHeader); a device whose
// table was lost (a signature in it) still is ErrLostZoneTable.

// foreignFile is a file of size bytes (a hole) holding the runs given,
// at their offsets.
func foreignFile(t *testing.T, size int64, runs map[int64][]byte) string {
	t.Helper()
	p := sparseFile(t, size)
	for off, b := range runs {
		patchFile(t, p, off, b)
	}
	return p
}

// refusedOpen opens the emu file at path with params and opts, which
// must fail in one line, leave the file as it was and read no more than
// maxCheckRead bytes; it returns the error.
func refusedOpen(t *testing.T, path, params string, opts Options) error {
	t.Helper()
	return refusedOpenOf(t, path, path, params, opts, maxCheckRead)
}

// refusedOpenOf is refusedOpen of the emu device dev (a loop device of
// the file at path, or path itself), reading no more than maxRead.
func refusedOpenOf(t *testing.T, dev, path, params string, opts Options, maxRead int64) error {
	t.Helper()
	before := fileDigest(t, path)
	read0, counted := readBytes(t)
	d, err := Open("emu:"+dev+params, opts)
	read1, _ := readBytes(t)
	if err == nil {
		d.Close()
		t.Fatal("Open succeeded (wrote a new zone table over the file)")
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error is not one line: %q", err)
	}
	if after := fileDigest(t, path); after != before {
		t.Fatal("the refused Open changed the file")
	}
	if counted && read1-read0 > maxRead {
		t.Errorf("Open read %d bytes to refuse it, want at most %d", read1-read0, maxRead)
	}
	return err
}

// everyOpen is each kind of Open a command makes of an emu file: serve
// and format, fsck, fsck --copy-to, format --force.
var everyOpen = []struct {
	name string
	opts Options
}{
	{"open", Options{}},
	{"fsck", Options{Existing: true}},
	{"fsck-copy-to", Options{Existing: true, InferLostTable: true}},
	{"format-force", Options{ReplaceLostTable: true}},
}

func TestEmuZeroPageForeignFileIsNoDevice(t *testing.T) {
	tar := append([]byte("h46b/file.txt\x00"), make([]byte, 243)...)
	tar = append(tar, []byte("ustar\x0000")...)
	for _, tc := range []struct {
		name   string
		file   func(t *testing.T) string
		params string
	}{
		{"tarball-in-the-header-area", func(t *testing.T) string {
			return foreignFile(t, 9<<20, map[int64][]byte{64 << 10: append(tar, randomBytes(1, 200<<10)...)})
		}, lostGeo},
		{"disk-image-after-a-zero-page", func(t *testing.T) string {
			return foreignFile(t, 9<<20, map[int64][]byte{4096: randomBytes(2, 3<<20)})
		}, lostGeo},
		{"data-at-a-zone-start", func(t *testing.T) string {
			return foreignFile(t, 9<<20, map[int64][]byte{1<<20 + 5<<20: randomBytes(3, 64<<10)})
		}, lostGeo},
		{"data-inside-a-zone", func(t *testing.T) string {
			return foreignFile(t, 9<<20, map[int64][]byte{1<<20 + 2<<20 + 8192: randomBytes(4, 5000)})
		}, lostGeo},
		{"data-past-the-zones-given", func(t *testing.T) string {
			return foreignFile(t, 20<<20, map[int64][]byte{15 << 20: randomBytes(5, 4096)})
		}, lostGeo},
		{"big-sparse-vm-image", func(t *testing.T) string {
			return foreignFile(t, bigNeed, map[int64][]byte{
				1<<20 + 3*64<<20:    randomBytes(6, 1<<20),
				1<<20 + 1000*64<<20: randomBytes(7, 64<<10),
			})
		}, bigLostGeo},
	} {
		for _, o := range everyOpen {
			t.Run(tc.name+"/"+o.name, func(t *testing.T) {
				path := tc.file(t)
				err := refusedOpen(t, path, tc.params, o.opts)
				msg := err.Error()
				if errors.Is(err, ErrLostZoneTable) || !strings.Contains(msg, "not an emu device") || !strings.Contains(msg, "nothing was written") {
					t.Fatalf("Open = %v, want a refusal as no emu device (not ErrLostZoneTable) that wrote nothing", err)
				}
				for _, w := range []string{path, "the first page reads as zeros", "format=1"} {
					if !strings.Contains(msg, w) {
						t.Errorf("error %q does not say %q", msg, w)
					}
				}
				if strings.Contains(msg, "--copy-to") || strings.Contains(msg, "--force") {
					t.Errorf("error names a salvage or start-over of a device that is not there: %q", msg)
				}
			})
		}
	}
}

// A device whose signature starts no zone of the geometry given (the
// signature's zones are past those it names, or the geometry is not
// the device's) still lost its table when the file's first data past
// the header starts with one: the device's own zone starts are block
// aligned, and its first data starts one of them.
func TestEmuZeroPageSignatureWhereDataStartsIsALostTable(t *testing.T) {
	sigDevice := func(zone int) func(t *testing.T) string {
		return func(t *testing.T) string {
			p := lostDevice(t)
			e, c := openEmuT(t, p, lostGeo)
			b := c.buf(c.bs, 6)
			copy(b, testSignature)
			c.append(zone, b)
			c.append(zone, c.buf(c.bs, 7))
			c.ok("Flush", e.Flush())
			c.ok("Close", e.Close())
			zeroSlots(t, p)
			return p
		}
	}
	for _, tc := range []struct {
		name   string
		file   func(t *testing.T) string
		params string
		want   string
	}{
		// testSignature's Zones is 4: zone 6 is not looked at.
		{"past-the-signature's-zones", sigDevice(6), lostGeo, "byte 7340032, zone 6"},
		// Zones of 768K start at 1M, 1.75M, 2.5M: not at 2M.
		{"another-zone-size", sigDevice(1), "?zone_size=768K&zones=8", "byte 2097152, zone 1"},
	} {
		for _, o := range []struct {
			name string
			opts Options
		}{
			{"open", Options{}},
			{"fsck", Options{Existing: true}},
		} {
			t.Run(tc.name+"/"+o.name, func(t *testing.T) {
				err := refusedOpen(t, tc.file(t), tc.params, o.opts)
				if !errors.Is(err, ErrLostZoneTable) {
					t.Fatalf("Open = %v, want ErrLostZoneTable", err)
				}
				for _, w := range []string{tc.want, "a zns test signature", "--copy-to"} {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
			})
		}
	}
}

// A geometry of more zones than the device's has a larger header: the
// device's first zones, its signature among them, lie in the header
// area of the geometry given, where the file's data then starts.
func TestEmuZeroPageSignatureInTheHeaderOfTheGeometryGiven(t *testing.T) {
	p := lostTable(0)(t) // its zone 0 at 1 MiB starts with testSignature
	const many = "?zone_size=64K&zones=100000"
	if off := emuDataOff(100000); off <= 1<<20+4096 {
		t.Fatalf("set-up: zones of the geometry given start at %d, not past the device's zone 0", off)
	}
	err := refusedOpen(t, p, many, Options{})
	if !errors.Is(err, ErrLostZoneTable) || !strings.Contains(err.Error(), "byte 1048576, in the header), which starts with a zns test signature") {
		t.Fatalf("Open = %v, want ErrLostZoneTable naming the signature where the data starts, in the header", err)
	}
}
