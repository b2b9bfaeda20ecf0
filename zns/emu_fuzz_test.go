package zns

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/uring"
)

// An emu file is user input: whatever it holds, Open returns a one-line
// error naming the file, or a device whose geometry and zone table are
// self-consistent, without panicking, touching the file or allocating
// from an unchecked length. These targets check that against an oracle
// of their own: the on-disk format as docs/zns.md and Emu describe it,
// decoded here with nothing from emu.go, and the zone rules of ZNS.
//
//	go test -ldflags=-checklinkname=0 -run XXX -fuzz FuzzDecodeEmuHeader -parallel 1 ./zns/
//	go test -ldflags=-checklinkname=0 -run XXX -fuzz FuzzOpenEmuImage -parallel 1 ./zns/

// fuzzImage is a real emu image, written by the code, that the targets
// seed from and damage.
type fuzzImage struct {
	params string // the device string's parameters it was made with
	file   []byte // the whole file
}

// fuzzGeos are the geometries of the seed images: conventional zones,
// limits, a zone_cap below the zone size, 512-byte blocks, and a zone
// count whose slot takes two pages.
var fuzzGeos = []string{
	"?zone_size=64K&zones=8&conv=1&max_open=2&max_active=3&max_append=16K",
	"?zone_size=16K&zones=300&zone_cap=12K&block_size=512&max_open=5",
	"?zone_size=128K&zones=4",
}

// makeFuzzImages makes one image per geometry: appends, a finished zone,
// an explicitly opened one, a closed one, and Flushes (the last one
// after appends only, so that its slot carries data checksums).
func makeFuzzImages(tb testing.TB) []fuzzImage {
	tb.Helper()
	var imgs []fuzzImage
	for n, params := range fuzzGeos {
		path := filepath.Join(tb.TempDir(), "dev")
		d, err := Open("emu:"+path+params, Options{RingEntries: 16})
		if err != nil {
			tb.Fatal(err)
		}
		g := d.Geometry()
		bs := int64(g.BlockSize)
		first := 0
		zs := make([]Zone, g.Zones)
		if _, err := d.Report(0, zs); err != nil {
			tb.Fatal(err)
		}
		for first < len(zs) && zs[first].Type == TypeConventional {
			first++
		}
		buf := fuzzBuf(tb, bs, byte(n))
		must := func(what string, err error) {
			if err != nil {
				tb.Fatalf("image %s: %s: %v", params, what, err)
			}
		}
		if first > 0 {
			must("write conv", fuzzWrite(d, 0, 0, buf))
		}
		if n < 2 {
			must("append", fuzzAppend(d, first, buf))
			must("append", fuzzAppend(d, first+1, buf))
			must("append", fuzzAppend(d, first+2, buf))
			must("FinishZone", d.FinishZone(first+2))
			must("CloseZone", d.CloseZone(first+1))
			must("OpenZone", d.OpenZone(first+3))
			must("Flush", d.Flush())
			must("append", fuzzAppend(d, first, buf))
			must("append", fuzzAppend(d, first+1, buf))
			must("Flush", d.Flush())
		}
		must("Close", d.Close())
		b, err := os.ReadFile(path)
		if err != nil {
			tb.Fatal(err)
		}
		imgs = append(imgs, fuzzImage{params, b})
	}
	return imgs
}

// Independent decoding of the format (docs/zns.md, Emu): two slots of
// slotLen bytes; a slot is magic, version u32, block size u32, seq u64,
// zones u32, conv u32, zone size u64, zone cap u64, max open u32, max
// active u32, max append u32, flags u32, then 16 bytes per zone, then a
// CRC-32C of all that; with flag 2 a checksum block follows: count u32,
// 24-byte records, CRC-32C over seq and the block. Zone data starts at
// the first MiB boundary past the slots.
var fuzzCRC = crc32.MakeTable(crc32.Castagnoli)

func fuzzSlotLen(zones int64) int64 { return (64 + 16*zones + 4 + 4095) / 4096 * 4096 }

func fuzzDataOff(zones int64) int64 { return (2*fuzzSlotLen(zones) + 1<<20 - 1) >> 20 << 20 }

// fuzzFixCRCs recomputes, in a file, the CRCs of the slots (fix&1) and
// of their checksum blocks (fix&2), so that the fuzzer gets past them to
// the fields they protect.
func fuzzFixCRCs(file []byte, fix byte) {
	le := binary.LittleEndian
	if len(file) < 64 || fix&3 == 0 {
		return
	}
	zones := int64(le.Uint32(file[24:]))
	if zones == 0 || zones > MaxSoftZones {
		return
	}
	slotLen := fuzzSlotLen(zones)
	for s := int64(0); s < 2; s++ {
		if (s+1)*slotLen > int64(len(file)) {
			return
		}
		b := file[s*slotLen : (s+1)*slotLen]
		z := int64(le.Uint32(b[24:]))
		if z == 0 || fuzzSlotLen(z) != slotLen {
			continue
		}
		end := 64 + 16*z
		if fix&1 != 0 {
			le.PutUint32(b[end:], crc32.Checksum(b[:end], fuzzCRC))
		}
		if fix&2 != 0 && le.Uint32(b[60:])&2 != 0 && end+12 <= slotLen {
			n := int64(le.Uint32(b[end+4:]))
			if r := end + 8 + n*24; n <= slotLen/24 && r+4 <= slotLen {
				sum := crc32.Update(crc32.Checksum(b[16:24], fuzzCRC), fuzzCRC, b[end+4:r])
				le.PutUint32(b[r:], sum)
			}
		}
	}
}

// fuzzCheckGeometry checks what any device's geometry must satisfy
// (docs/zns.md's rules for a device string, and MaxSoftZones), and that
// an emu file of size bytes holds it.
func fuzzCheckGeometry(t *testing.T, g Geometry, conv int, size int64) {
	t.Helper()
	bs := int64(g.BlockSize)
	switch {
	case g.Zones < 1 || g.Zones > MaxSoftZones:
		t.Fatalf("geometry %+v: zone count out of range", g)
	case bs < 512 || bs > 64<<10 || bs&(bs-1) != 0:
		t.Fatalf("geometry %+v: bad block size", g)
	case g.ZoneSize <= 0 || g.ZoneSize%bs != 0 || g.ZoneCap <= 0 || g.ZoneCap > g.ZoneSize || g.ZoneCap%bs != 0:
		t.Fatalf("geometry %+v: bad zone size or capacity", g)
	case g.MaxAppend <= 0 || int64(g.MaxAppend)%bs != 0 || int64(g.MaxAppend) > g.ZoneCap:
		t.Fatalf("geometry %+v: bad max append", g)
	case g.MaxOpen < 0 || g.MaxActive < 0 || (g.MaxOpen > 0 && g.MaxActive > 0 && g.MaxOpen > g.MaxActive):
		t.Fatalf("geometry %+v: bad open/active limits", g)
	case conv < 0 || conv >= g.Zones:
		t.Fatalf("geometry %+v: %d conventional zones leave no sequential one", g, conv)
	case g.ZoneSize > math.MaxInt64/int64(g.Zones):
		t.Fatalf("geometry %+v: overflows an offset", g)
	}
	if size >= 0 {
		if need := fuzzDataOff(int64(g.Zones)) + int64(g.Zones)*g.ZoneSize; need > size {
			t.Fatalf("geometry %+v needs %d bytes, the file has %d", g, need, size)
		}
	}
}

// fuzzCheckZones checks a reported zone table against the zone rules:
// zones in place, conventional ones first, each sequential zone's write
// pointer where its condition puts it, block aligned, and the open and
// active counts within the limits.
func fuzzCheckZones(t *testing.T, g Geometry, zs []Zone) (conv int) {
	t.Helper()
	bs := int64(g.BlockSize)
	open, active := 0, 0
	for i, z := range zs {
		if z.Start != int64(i)*g.ZoneSize || z.Len != g.ZoneSize || z.Cap != g.ZoneCap {
			t.Fatalf("zone %d: %+v, geometry %+v", i, z, g)
		}
		if z.Type == TypeConventional {
			if i != conv || z.Cond != CondNotWP {
				t.Fatalf("zone %d: conventional %+v after a sequential zone or not NOT_WP", i, z)
			}
			conv++
			continue
		}
		rel := z.WP - z.Start
		var ok bool
		switch z.Cond {
		case CondEmpty:
			ok = rel == 0
		case CondImpOpen, CondClosed:
			ok = rel > 0 && rel < z.Cap
		case CondExpOpen:
			ok = rel >= 0 && rel < z.Cap
		case CondFull:
			ok = rel == z.Cap
		case CondReadOnly, CondOffline:
			ok = rel >= 0 && rel <= z.Cap
		}
		if z.Type != TypeSeqRequired || !ok || rel%bs != 0 {
			t.Fatalf("zone %d: %s wp +%d (cap %d, block %d): inconsistent", i, z.Cond, rel, z.Cap, bs)
		}
		if z.Cond.Open() {
			open++
		}
		if z.Cond.Active() {
			active++
		}
	}
	if conv == len(zs) {
		t.Fatal("no sequential zone")
	}
	if (g.MaxOpen > 0 && open > g.MaxOpen) || (g.MaxActive > 0 && active > g.MaxActive) {
		t.Fatalf("%d open, %d active zones; limits %d, %d", open, active, g.MaxOpen, g.MaxActive)
	}
	return conv
}

// FuzzDecodeEmuHeader: decodeEmuHeader takes any bytes; what it accepts
// is a slot of the length its zone count gives, its CRC right, a
// geometry a device string could give, a sequence number a Flush can
// still advance, and a checksum block that lies in the slot and whose
// CRC is right; loadZones then refuses an entry or gives a table that
// obeys the zone rules.
func FuzzDecodeEmuHeader(f *testing.F) {
	for _, img := range makeFuzzImages(f) {
		zones := int64(binary.LittleEndian.Uint32(img.file[24:]))
		sl := fuzzSlotLen(zones)
		f.Add(img.file[:sl], byte(1))
		f.Add(fuzzTrim(img.file[:sl]), byte(1|4))
		f.Add(fuzzTrim(img.file[sl:2*sl]), byte(3|4))
	}
	f.Fuzz(func(t *testing.T, b []byte, fix byte) {
		if fix&4 != 0 {
			b = fuzzPad(b)
		}
		fuzzFixCRCs(b, fix)
		h, ok := decodeEmuHeader(b)
		if !ok {
			return
		}
		le := binary.LittleEndian
		if len(b) < 64 || string(b[:8]) != emuMagic || le.Uint32(b[8:]) != 1 {
			t.Fatal("accepted a slot without the magic and version 1")
		}
		zones := int64(le.Uint32(b[24:]))
		if zones < 1 || zones > MaxSoftZones || int64(len(b)) != fuzzSlotLen(zones) {
			t.Fatalf("accepted a %d-byte slot naming %d zones", len(b), zones)
		}
		end := 64 + 16*zones
		if crc32.Checksum(b[:end], fuzzCRC) != le.Uint32(b[end:]) {
			t.Fatal("accepted a slot with a wrong CRC")
		}
		g := Geometry{Zones: int(zones), BlockSize: int(le.Uint32(b[12:])), ZoneSize: int64(le.Uint64(b[32:])),
			ZoneCap: int64(le.Uint64(b[40:])), MaxOpen: int(le.Uint32(b[48:])), MaxActive: int(le.Uint32(b[52:])),
			MaxAppend: int(le.Uint32(b[56:]))}
		if h.geo != g || h.conv != int(le.Uint32(b[28:])) || h.seq != le.Uint64(b[16:]) {
			t.Fatalf("decoded %+v conv %d seq %d from a slot holding %+v", h.geo, h.conv, h.seq, g)
		}
		fuzzCheckGeometry(t, g, h.conv, -1)
		// A Flush writes seq+1 to the other slot: it must neither wrap to
		// 0, which no Open takes, nor near it.
		if h.seq == 0 || h.seq >= 1<<62 {
			t.Fatalf("accepted sequence number %d", h.seq)
		}
		if le.Uint32(b[60:])&2 == 0 {
			if h.sums != nil {
				t.Fatal("checksum records from a slot without the flag")
			}
		} else {
			n := int64(len(h.sums)) / 24
			r := end + 8 + n*24
			if int64(len(h.sums))%24 != 0 || int64(le.Uint32(b[end+4:])) != n || r+4 > int64(len(b)) ||
				!bytes.Equal(h.sums, b[end+8:r]) ||
				crc32.Update(crc32.Checksum(b[16:24], fuzzCRC), fuzzCRC, b[end+4:r]) != le.Uint32(b[r:]) {
				t.Fatalf("checksum block of %d bytes does not match the slot", len(h.sums))
			}
		}
		e := &Emu{}
		e.zoneTable = newZoneTable(h.geo, h.conv, false)
		if err := e.loadZones(h.raw); err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		zs := make([]Zone, g.Zones)
		if n, err := e.Report(0, zs); err != nil || n != g.Zones {
			t.Fatalf("Report: %d, %v", n, err)
		}
		if conv := fuzzCheckZones(t, g, zs); conv != h.conv {
			t.Fatalf("%d conventional zones, the slot says %d", conv, h.conv)
		}
	})
}

// fuzzTrim is a slot without its trailing zeros, which fuzzPad puts
// back: a slot is mostly zeros, and the fuzzer mutates and minimizes a
// short input much faster.
func fuzzTrim(b []byte) []byte {
	n := len(b)
	for n > 0 && b[n-1] == 0 {
		n--
	}
	return bytes.Clone(b[:n])
}

// fuzzPad pads b with zeros to the slot length its zone count gives.
func fuzzPad(b []byte) []byte {
	if len(b) < 64 {
		return b
	}
	zones := int64(binary.LittleEndian.Uint32(b[24:]))
	if zones == 0 || zones > MaxSoftZones || fuzzSlotLen(zones) <= int64(len(b)) {
		return b
	}
	return append(b, make([]byte, fuzzSlotLen(zones)-int64(len(b)))...)
}

// FuzzOpenEmuImage writes s0 and s1 over the starts of the two header
// slots of a real image (pick chooses which image; with fix&4, s0 is the
// whole file: empty, truncated, or anything else) and opens it as a user
// would, with no parameters. Open
// fails with one line naming the file and leaves it as it was, or gives
// a device that obeys the zone rules and reads what the file holds below
// each write pointer and zeros past it (without writing the file); one
// block appended and flushed then reads back, with the same zone table,
// after a reopen.
func FuzzOpenEmuImage(f *testing.F) {
	imgs := makeFuzzImages(f)
	for i, img := range imgs {
		sl := fuzzSlotLen(int64(binary.LittleEndian.Uint32(img.file[24:])))
		f.Add(fuzzTrim(img.file[:sl]), fuzzTrim(img.file[sl:2*sl]), byte(i), byte(0))
		f.Add(fuzzTrim(img.file[:sl]), fuzzTrim(img.file[sl:2*sl]), byte(i), byte(3))
	}
	f.Add([]byte{}, []byte{}, byte(0), byte(4))
	f.Add(imgs[0].file[:4096], []byte{}, byte(0), byte(4))
	f.Add([]byte("root:x:0:0:root:/root:/bin/bash\n"), []byte{}, byte(0), byte(4))
	// Damaged slots are warned about; thousands of warnings a second
	// would bury the fuzzer's own output.
	logger := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	f.Cleanup(func() { slog.SetDefault(logger) })
	dir := f.TempDir()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		// tmpfs: a Flush's fdatasync costs nothing there.
		if d, err := os.MkdirTemp("/dev/shm", "zfemufuzz"); err == nil {
			dir = d
			f.Cleanup(func() { os.RemoveAll(d) })
		}
	}
	f.Fuzz(func(t *testing.T, s0, s1 []byte, pick, fix byte) {
		img := imgs[int(pick)%len(imgs)]
		var file []byte
		if fix&4 != 0 {
			file = bytes.Clone(s0)
		} else {
			file = bytes.Clone(img.file)
			sl := int(fuzzSlotLen(int64(binary.LittleEndian.Uint32(img.file[24:]))))
			copy(file[:sl], s0)
			copy(file[sl:2*sl], s1)
		}
		fuzzFixCRCs(file, fix)
		path := filepath.Join(dir, "dev")
		os.Remove(path)
		if err := os.WriteFile(path, file, 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(path)
		unchanged := func(when string) {
			t.Helper()
			if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, file) {
				t.Fatalf("%s: the file changed (%d bytes, was %d): %v", when, len(got), len(file), err)
			}
		}
		d, err := Open("emu:"+path, Options{RingEntries: 16})
		if err != nil {
			if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, path) {
				t.Fatalf("error %q: want one line naming the file", msg)
			}
			unchanged("failed open")
			return
		}
		zs := fuzzCheckDevice(t, d, file)
		unchanged("open and reads")
		// Round trip: one appended block, flushed, survives a reopen with
		// the zone table as it was flushed.
		buf := fuzzBuf(t, int64(d.Geometry().BlockSize), 0x5c)
		at := int64(-1)
		for _, z := range zs {
			if z.Type == TypeConventional || z.Cond == CondFull || z.Cond == CondReadOnly || z.Cond == CondOffline || z.WP-z.Start >= z.Cap {
				continue
			}
			err := fuzzAppend(d, int(z.Start/z.Len), buf)
			if err == nil {
				at = z.WP
				break
			}
			if !errors.Is(err, ErrTooManyActive) && !errors.Is(err, ErrTooManyOpen) {
				t.Fatalf("append to zone %+v: %v", z, err)
			}
		}
		if err := d.Flush(); err != nil {
			t.Fatalf("Flush: %v", err)
		}
		before := make([]Zone, len(zs))
		if _, err := d.Report(0, before); err != nil {
			t.Fatal(err)
		}
		if err := d.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		d, err = Open("emu:"+path, Options{RingEntries: 16})
		if err != nil {
			t.Fatalf("reopen after a flush: %v", err)
		}
		defer d.Close()
		after := make([]Zone, len(zs))
		if n, err := d.Report(0, after); err != nil || n != len(zs) {
			t.Fatalf("Report after reopen: %d, %v", n, err)
		}
		for i := range after {
			if after[i] != before[i] {
				t.Fatalf("zone %d flushed as %+v, reopened as %+v", i, before[i], after[i])
			}
		}
		if at >= 0 {
			if got, err := fuzzRead(d, at, int64(len(buf))); err != nil || !bytes.Equal(got, buf) {
				t.Fatalf("flushed block at %d does not read back: %v", at, err)
			}
		}
	})
}

// fuzzCheckDevice checks an opened device against the file it was opened
// from: a geometry that some slot with a right CRC holds and the file
// can hold, zones that obey the zone rules, reads that give the file's
// bytes below each write pointer and zeros past it (a finished zone:
// the file's bytes up to some point, then zeros).
func fuzzCheckDevice(t *testing.T, d Device, file []byte) []Zone {
	t.Helper()
	g := d.Geometry()
	zs := make([]Zone, g.Zones)
	if n, err := d.Report(0, zs); err != nil || n != g.Zones {
		t.Fatalf("Report: %d, %v", n, err)
	}
	conv := fuzzCheckZones(t, g, zs)
	fuzzCheckGeometry(t, g, conv, int64(len(file)))
	le := binary.LittleEndian
	sl := fuzzSlotLen(int64(g.Zones))
	stored := false
	for s := int64(0); s < 2 && (s+1)*sl <= int64(len(file)); s++ {
		b := file[s*sl:]
		end := 64 + 16*int64(g.Zones)
		stored = stored || string(b[:8]) == emuMagic && int(le.Uint32(b[24:])) == g.Zones &&
			int(le.Uint32(b[28:])) == conv && int(le.Uint32(b[12:])) == g.BlockSize &&
			int64(le.Uint64(b[32:])) == g.ZoneSize && int64(le.Uint64(b[40:])) == g.ZoneCap &&
			int(le.Uint32(b[48:])) == g.MaxOpen && int(le.Uint32(b[52:])) == g.MaxActive &&
			int(le.Uint32(b[56:])) == g.MaxAppend &&
			crc32.Checksum(b[:end], fuzzCRC) == le.Uint32(b[end:])
	}
	if !stored {
		t.Fatalf("geometry %+v conv %d is in no slot of the file", g, conv)
	}
	dataOff := fuzzDataOff(int64(g.Zones))
	for _, z := range zs {
		got, err := fuzzRead(d, z.Start, z.Len)
		if z.Cond == CondOffline {
			if !errors.Is(err, ErrReadOnly) {
				t.Fatalf("read offline zone at %d: %v", z.Start, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("read zone at %d: %v", z.Start, err)
		}
		want := file[dataOff+z.Start : dataOff+z.Start+z.Len]
		k := z.Len // the file's bytes below k, zeros from k
		switch {
		case z.Type == TypeConventional:
		case z.Cond == CondFull || z.Cond == CondReadOnly:
			k = 0
			for k < z.Len && got[k] == want[k] {
				k++
			}
		default:
			k = z.WP - z.Start
		}
		if !bytes.Equal(got[:k], want[:k]) || !bytes.Equal(got[k:], make([]byte, z.Len-k)) {
			t.Fatalf("zone at %d (%s, wp +%d): reads other than the file's bytes below +%d and zeros from there", z.Start, z.Cond, z.WP-z.Start, k)
		}
	}
	return zs
}

// fuzzBuf is page-aligned memory outside the Go heap (O_DIRECT takes
// it), filled with a pattern.
func fuzzBuf(tb testing.TB, n int64, seed byte) []byte {
	tb.Helper()
	b, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		tb.Fatalf("mmap %d: %v", n, err)
	}
	tb.Cleanup(func() { _ = unix.Munmap(b) })
	for i := range b {
		b[i] = seed ^ byte(i*31)
	}
	return b
}

func fuzzAppend(d Device, zone int, buf []byte) error {
	w := &appendWaiter{ch: make(chan appendResult, 1)}
	if err := d.Append(zone, [][]byte{buf}, w); err != nil {
		return err
	}
	if err := d.Ring().Flush(); err != nil {
		return err
	}
	return (<-w.ch).err
}

func fuzzWrite(d Device, zone int, off int64, buf []byte) error {
	w := uring.NewWaiter()
	if err := d.Write(zone, off, [][]byte{buf}, w); err != nil {
		return err
	}
	return CompletionErr("write", d.Ring().Wait(w))
}

// fuzzRead reads n bytes at off into memory of its own (unmapped after).
func fuzzRead(d Device, off, n int64) ([]byte, error) {
	b, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, err
	}
	defer unix.Munmap(b)
	for i := range b {
		b[i] = 0xa5 // garbage the read must overwrite
	}
	w := uring.NewWaiter()
	if err := d.Read(off, b, w); err != nil {
		return nil, err
	}
	res := d.Ring().Wait(w)
	if err := CompletionErr("read", res); err != nil {
		return nil, err
	}
	if int64(res.Res) != n {
		return nil, errors.New("short read")
	}
	return bytes.Clone(b), nil
}
