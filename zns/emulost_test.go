package zns

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// An emu file whose two header slots read as zeros is either blank (a
// new or pre-sized file: Open makes a device of it) or a device that
// lost its zone table (its zones still hold data): Open refuses that
// one with ErrLostZoneTable and writes nothing, unless told to start
// it over (ReplaceLostTable, format=1). It used to write a fresh, empty
// table over it: every zone's write pointer and, in effect, all its
// data lost without a word.

// lostGeo is the geometry of the small test devices: 8 zones of 1 MiB,
// data from 1 MiB, one 4 KiB slot each.
const lostGeo = emuTestGeo

// bigLostGeo is a 64 GiB device: 1024 zones of 64 MiB, left sparse.
const bigLostGeo = "?zone_size=64M&zones=1024"

// lostDevice makes an emu device on a new file with data appended to
// the zones given, flushed, and returns the file's path. Each zone's
// data starts with testSignature, as a file system's does with its
// own: a file whose table is lost is a device only if something of one
// shows (checkLostTable).
func lostDevice(t *testing.T, zones ...int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dev")
	e, c := openEmuT(t, path, lostGeo)
	for _, z := range zones {
		c.append(z, signed(c.buf(c.bs, byte(z+1))))
	}
	c.ok("Flush", e.Flush())
	c.ok("Close", e.Close())
	return path
}

// signed is b with testSignature over its start.
func signed(b []byte) []byte {
	copy(b, testSignature)
	return b
}

// lostTable makes a lostDevice with data in zones, then zeroes both of
// its header slots: its zone table is lost.
func lostTable(zones ...int) func(t *testing.T) string {
	return func(t *testing.T) string {
		p := lostDevice(t, zones...)
		zeroSlots(t, p)
		return p
	}
}

// zeroLeadTable makes a device whose only data is in zone 3, three
// blocks of zeros then one of data (testSignature first: past the
// zones it is looked for at, it shows where the file's data starts),
// and zeroes both of its header
// slots; noHoles then writes every block of the file (cp
// --sparse=never).
func zeroLeadTable(noHoles bool) func(t *testing.T) string {
	return func(t *testing.T) string {
		path := lostDevice(t)
		e, c := openEmuT(t, path, lostGeo)
		b := c.buf(4*c.bs, 4)
		clear(b[:3*c.bs])
		signed(b[3*c.bs:])
		c.append(3, b)
		c.ok("Flush", e.Flush())
		c.ok("Close", e.Close())
		zeroSlots(t, path)
		if noHoles {
			all, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			patchFile(t, path, 0, all)
		}
		return path
	}
}

// patchFile writes p at off in the file at path.
func patchFile(t *testing.T, path string, off int64, p []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteAt(p, off)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

// zeroSlots zeroes both header slots of a device of lostGeo.
func zeroSlots(t *testing.T, path string) {
	t.Helper()
	patchFile(t, path, 0, make([]byte, 2*emuSlotLen(8)))
}

// sparseFile makes a file of size bytes holding nothing (a hole).
func sparseFile(t *testing.T, size int64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dev")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// fileDigest is a digest of the file at path: its size and every byte
// of its data extents (holes read as zeros and are skipped: a 64 GiB
// sparse file is not read whole), with where each extent starts.
func fileDigest(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "size %d\n", st.Size())
	fd := int(f.Fd())
	for off := int64(0); off < st.Size(); {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "extent at %d\n", data)
		if _, err := io.Copy(h, io.NewSectionReader(f, data, hole-data)); err != nil {
			t.Fatal(err)
		}
		off = hole
	}
	return hex.EncodeToString(h.Sum(nil))
}

// bigNeed is the file size bigLostGeo needs.
const bigNeed = 1<<20 + 1024*64<<20

// readBytes is what this process has read from files so far (rchar in
// /proc/self/io), and whether the kernel says.
func readBytes(t *testing.T) (int64, bool) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "rchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// maxCheckRead bounds what Open may read of a 64 GiB sparse file to tell
// blank from damaged: its header area and a block per zone at most.
const maxCheckRead = 16 << 20

func TestEmuOpenRefusesALostZoneTable(t *testing.T) {
	for _, tc := range []struct {
		name string
		// file makes the file; params and opts open it.
		file   func(t *testing.T) string
		params string
		opts   Options
		// want is in the error.
		want string
	}{
		{"slots-zeroed-data-in-zone-0", lostTable(0, 3), lostGeo, Options{}, "zone 0"},
		{"slots-zeroed-data-only-in-the-last-zone", lostTable(7), lostGeo, Options{}, "zone 7"},
		{"other-geometry-given", lostTable(5), "?zone_size=512K&zones=16", Options{}, "zone 10"},
		{"slot-0-zeroed-slot-1-torn", func(t *testing.T) string {
			p := lostDevice(t)
			patchFile(t, p, 0, make([]byte, emuSlotLen(8)))
			patchFile(t, p, emuSlotLen(8)+100, []byte{0xff, 0xff}) // its CRC no longer matches
			return p
		}, lostGeo, Options{}, "in the header"},
		{"existing-only-fsck", lostTable(2), lostGeo, Options{Existing: true}, "zone 2"},
		// A zone whose data starts with blocks of zeros (data that
		// does, a failed write zeroed): only its first 4 KiB were
		// read, and the file taken for blank was formatted over.
		{"data-after-zero-blocks-at-the-zone-start", zeroLeadTable(false), lostGeo, Options{}, "zone 3"},
		{"data-after-zero-blocks-at-the-zone-start-no-holes", zeroLeadTable(true), lostGeo, Options{}, "zone 3"},
		{"big-sparse-file-data-far-in", func(t *testing.T) string {
			p := sparseFile(t, bigNeed)
			patchFile(t, p, 1<<20+1000*64<<20+8192, testSignature)
			return p
		}, bigLostGeo, Options{}, "zone 1000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.file(t)
			err := refusedOpen(t, path, tc.params, tc.opts)
			if !errors.Is(err, ErrLostZoneTable) {
				t.Fatalf("Open = %v, want ErrLostZoneTable", err)
			}
			msg := err.Error()
			for _, w := range []string{path, tc.want, "format --force"} {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not say %q", msg, w)
				}
			}
		})
	}
}

// A blank file, or one Open is told to start over, still becomes a new
// device, as it always did: every zone empty, the table on the file (it
// reopens without the geometry).
func TestEmuOpenMakesADeviceOfABlankFile(t *testing.T) {
	for _, tc := range []struct {
		name   string
		file   func(t *testing.T) string
		params string
		opts   Options
	}{
		{"missing-path", func(t *testing.T) string { return filepath.Join(t.TempDir(), "dev") }, lostGeo, Options{}},
		{"empty-file", func(t *testing.T) string { return sparseFile(t, 0) }, lostGeo, Options{}},
		{"pre-sized-sparse", func(t *testing.T) string { return sparseFile(t, 9<<20) }, lostGeo, Options{}},
		{"pre-sized-short", func(t *testing.T) string { return sparseFile(t, 3<<20) }, lostGeo, Options{}},
		{"pre-sized-written-zeros", func(t *testing.T) string {
			p := sparseFile(t, 0)
			patchFile(t, p, 0, make([]byte, 9<<20))
			return p
		}, lostGeo, Options{}},
		{"big-sparse-blank", func(t *testing.T) string { return sparseFile(t, bigNeed) }, bigLostGeo, Options{}},
		{"lost-table-replace", lostTable(0, 3), lostGeo, Options{ReplaceLostTable: true}},
		{"lost-table-format=1", lostTable(0, 3), lostGeo + "&format=1", Options{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.file(t)
			read0, counted := readBytes(t)
			e, c := func() (*Emu, *conf) {
				d, err := Open("emu:"+path+tc.params, tc.opts)
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				return d.(*Emu), newConf(t, d)
			}()
			read1, _ := readBytes(t)
			if counted && tc.name == "big-sparse-blank" && read1-read0 > maxCheckRead {
				t.Errorf("Open read %d bytes of a blank sparse file, want at most %d", read1-read0, maxCheckRead)
			}
			for i := range e.Geometry().Zones {
				if z := c.zone(i); z.Cond != CondEmpty || z.WP != z.Start {
					t.Fatalf("zone %d of the new device: %s, wp +%d", i, z.Cond, z.WP-z.Start)
				}
			}
			c.ok("Close", e.Close())
			d, err := Open("emu:"+path, Options{Existing: true})
			if err != nil {
				t.Fatalf("reopen without the geometry: %v", err)
			}
			d.Close()
		})
	}
}
