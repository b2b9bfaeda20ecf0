package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
)

// h19b differential harness: the same operations through the daemon's
// Go client and through the os package on a local directory, with the
// differences docs/protocol.md documents modelled. A file removed or
// renamed over while open stays its handles', as on the os side.

type h19bHandle struct {
	client int
	zh     uint32
	osf    *os.File
	ino    int
	name   string
}

type h19bDiff struct {
	t       testing.TB
	ctx     context.Context
	dir     string
	clients []*Client
	hs      []*h19bHandle // open handles
	nameIno map[string]int
	nextIno int
	log     []string
	rng     *rand.Rand
	syncAll bool // fsync after every change to a file's bytes or size
}

func newH19bDiff(t testing.TB, socket string, nclients int, seed int64) *h19bDiff {
	d := &h19bDiff{t: t, ctx: context.Background(), dir: t.TempDir(),
		nameIno: map[string]int{}, rng: rand.New(rand.NewSource(seed))}
	for i := range nclients {
		if i == 2 {
			d.clients = append(d.clients, dialFraming(t, socket))
			continue
		}
		d.clients = append(d.clients, dial(t, socket))
	}
	return d
}

// errnoOf reduces an error to its errno (0: nil, -1: io.EOF).
func errnoOf(err error) int {
	if err == nil {
		return 0
	}
	var st Status
	if errors.As(err, &st) {
		return int(st)
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		return int(en)
	}
	if errors.Is(err, io.EOF) {
		return -1
	}
	return -2
}

func errName(n int) string {
	switch n {
	case 0:
		return "ok"
	case -1:
		return "EOF"
	case -2:
		return "other"
	}
	return syscall.Errno(n).Error()
}

func (d *h19bDiff) note(format string, a ...any) {
	d.log = append(d.log, fmt.Sprintf(format, a...))
}

func (d *h19bDiff) fail(format string, a ...any) {
	d.t.Helper()
	start := max(0, len(d.log)-40)
	d.t.Fatalf("%s\nlast ops:\n  %s", fmt.Sprintf(format, a...), strings.Join(d.log[start:], "\n  "))
}

func (d *h19bDiff) checkErr(what string, zerr, oerr error, want int) bool {
	d.t.Helper()
	z, o := errnoOf(zerr), errnoOf(oerr)
	if want != 0 { // a documented difference: the daemon's answer is want
		o = want
	}
	if z != o {
		d.fail("%s: zonefold %s (%v), os %s (%v)", what, errName(z), zerr, errName(o), oerr)
	}
	return z == 0
}

func (d *h19bDiff) open(ci int, name string, flags uint8) *h19bHandle {
	d.t.Helper()
	d.note("c%d open %.20q flags %d", ci, name, flags)
	zh, zsize, zerr := d.clients[ci].Open(d.ctx, name, flags)
	of := os.O_RDWR
	if flags&OpenCreate != 0 {
		of |= os.O_CREATE
	}
	if flags&OpenExcl != 0 {
		of |= os.O_EXCL
	}
	if flags&OpenTrunc != 0 {
		of |= os.O_TRUNC
	}
	osf, oerr := os.OpenFile(filepath.Join(d.dir, name), of, 0o644)
	if !d.checkErr(fmt.Sprintf("open %.20q flags %d", name, flags), zerr, oerr, 0) {
		return nil
	}
	fi, _ := osf.Stat()
	if zsize != fi.Size() {
		d.fail("open %q: zonefold size %d, os %d", name, zsize, fi.Size())
	}
	ino, ok := d.nameIno[name]
	if !ok {
		d.nextIno++
		ino = d.nextIno
		d.nameIno[name] = ino
	}
	h := &h19bHandle{client: ci, zh: zh, osf: osf, ino: ino, name: name}
	d.hs = append(d.hs, h)
	if d.syncAll && flags&OpenTrunc != 0 {
		d.fsync(h)
	}
	return h
}

func (d *h19bDiff) write(h *h19bHandle, off int64, p []byte) {
	d.t.Helper()
	d.note("c%d h%d(%.20q#%d) write off %d len %d", h.client, h.zh, h.name, h.ino, off, len(p))
	zn, zerr := d.clients[h.client].WriteAt(d.ctx, h.zh, p, off)
	on, oerr := h.osf.WriteAt(p, off)
	if d.checkErr(fmt.Sprintf("write h%d off %d len %d", h.zh, off, len(p)), zerr, oerr, 0) && zn != on {
		d.fail("write: zonefold wrote %d, os %d", zn, on)
	}
	if d.syncAll {
		d.fsync(h)
	}
}

func (d *h19bDiff) read(h *h19bHandle, off int64, n int) {
	d.t.Helper()
	d.note("c%d h%d(%.20q#%d) read off %d len %d", h.client, h.zh, h.name, h.ino, off, n)
	zb, ob := make([]byte, n), make([]byte, n)
	zn, zerr := d.clients[h.client].ReadAt(d.ctx, h.zh, zb, off)
	on, oerr := h.osf.ReadAt(ob, off)
	if !d.checkErr(fmt.Sprintf("read h%d off %d len %d", h.zh, off, n), zerr, oerr, 0) && errnoOf(zerr) != -1 {
		return
	}
	if zn != on {
		d.fail("read h%d off %d len %d: zonefold %d bytes, os %d", h.zh, off, n, zn, on)
	}
	if i := firstDiff(zb[:zn], ob[:on]); i >= 0 {
		d.fail("read h%d off %d len %d: byte %d (file offset %d): zonefold %#x, os %#x", h.zh, off, n, i, off+int64(i), zb[i], ob[i])
	}
}

func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func (d *h19bDiff) truncate(h *h19bHandle, size int64) {
	d.t.Helper()
	d.note("c%d h%d(%.20q#%d) truncate %d", h.client, h.zh, h.name, h.ino, size)
	zerr := d.clients[h.client].Truncate(d.ctx, h.zh, size)
	oerr := h.osf.Truncate(size)
	d.checkErr(fmt.Sprintf("truncate h%d %d", h.zh, size), zerr, oerr, 0)
	if d.syncAll {
		d.fsync(h)
	}
}

func (d *h19bDiff) fsync(h *h19bHandle) {
	d.t.Helper()
	d.note("c%d h%d(%.20q#%d) fsync", h.client, h.zh, h.name, h.ino)
	zerr := d.clients[h.client].Fsync(d.ctx, h.zh)
	oerr := h.osf.Sync()
	d.checkErr(fmt.Sprintf("fsync h%d", h.zh), zerr, oerr, 0)
}

func (d *h19bDiff) fstat(h *h19bHandle) {
	d.t.Helper()
	d.note("c%d h%d(%.20q#%d) fstat", h.client, h.zh, h.name, h.ino)
	c := d.clients[h.client]
	c.mu.Lock()
	r, zerr := c.call(d.ctx, Request{Op: OpFstat, Handle: h.zh})
	c.mu.Unlock()
	fi, oerr := h.osf.Stat()
	if d.checkErr(fmt.Sprintf("fstat h%d", h.zh), zerr, oerr, 0) && int64(r.Val) != fi.Size() {
		d.fail("fstat h%d: zonefold size %d, os %d", h.zh, r.Val, fi.Size())
	}
}

// raw sends a read or write of len n (0 allowed, which the client's
// WriteAt never sends) at off straight to the daemon.
func (d *h19bDiff) raw(h *h19bHandle, op Op, off int64, n uint32) (Reply, error) {
	c := d.clients[h.client]
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.claim(d.ctx); err != nil {
		return Reply{}, err
	}
	return c.call(d.ctx, Request{Op: op, Handle: h.zh, Off: uint64(off), Len: n})
}

func (d *h19bDiff) zeroLen(h *h19bHandle, op Op, off int64) {
	d.t.Helper()
	d.note("c%d h%d(%.20q#%d) %s len 0 off %d", h.client, h.zh, h.name, h.ino, op, off)
	r, zerr := d.raw(h, op, off, 0)
	var oerr error
	if op == OpWrite {
		_, oerr = h.osf.WriteAt(nil, off)
	} else {
		_, oerr = h.osf.ReadAt(nil, off)
	}
	if d.checkErr(fmt.Sprintf("%s len 0 h%d off %d", op, h.zh, off), zerr, oerr, 0) && r.Val != 0 {
		d.fail("%s len 0: val %d", op, r.Val)
	}
}

func (d *h19bDiff) close(h *h19bHandle) {
	d.t.Helper()
	d.note("c%d h%d(%.20q#%d) close", h.client, h.zh, h.name, h.ino)
	zerr := d.clients[h.client].CloseFile(d.ctx, h.zh)
	oerr := h.osf.Close()
	d.checkErr(fmt.Sprintf("close h%d", h.zh), zerr, oerr, 0)
	for i, x := range d.hs {
		if x == h {
			d.hs = append(d.hs[:i], d.hs[i+1:]...)
			break
		}
	}
}

func (d *h19bDiff) remove(ci int, name string) {
	d.t.Helper()
	d.note("c%d remove %.20q", ci, name)
	zerr := d.clients[ci].Remove(d.ctx, name)
	oerr := os.Remove(filepath.Join(d.dir, name))
	if d.checkErr(fmt.Sprintf("remove %.20q", name), zerr, oerr, 0) {
		delete(d.nameIno, name)
	}
}

func (d *h19bDiff) rename(ci int, a, b string) {
	d.t.Helper()
	d.note("c%d rename %.20q %.20q", ci, a, b)
	zerr := d.clients[ci].Rename(d.ctx, a, b)
	oerr := os.Rename(filepath.Join(d.dir, a), filepath.Join(d.dir, b))
	want := 0
	if len(a) > 255 || len(b) > 255 {
		want = int(syscall.ENAMETOOLONG) // checked before the lookups: any order is fine
	}
	if d.checkErr(fmt.Sprintf("rename %.20q %.20q", a, b), zerr, oerr, want) && a != b {
		// The replaced file lives on for its open handles, on both
		// sides (TestH19bRenameOverOpenFileKeepsItsHandles).
		d.nameIno[b] = d.nameIno[a]
		delete(d.nameIno, a)
		for _, h := range d.hs {
			if h.ino == d.nameIno[b] {
				h.name = b
			}
		}
	}
}

func (d *h19bDiff) stat(ci int, name string) {
	d.t.Helper()
	d.note("c%d stat %q", ci, name)
	zfi, zerr := d.clients[ci].Stat(d.ctx, name)
	ofi, oerr := os.Stat(filepath.Join(d.dir, name))
	if d.checkErr(fmt.Sprintf("stat %q", name), zerr, oerr, 0) && zfi.Size != ofi.Size() {
		d.fail("stat %q: zonefold size %d, os %d", name, zfi.Size, ofi.Size())
	}
}

func (d *h19bDiff) list(ci int) {
	d.t.Helper()
	d.note("c%d list", ci)
	zl, zerr := d.clients[ci].List(d.ctx)
	if zerr != nil {
		d.fail("list: %v", zerr)
	}
	ents, err := os.ReadDir(d.dir)
	if err != nil {
		d.t.Fatal(err)
	}
	var z, o []string
	for _, e := range zl {
		z = append(z, fmt.Sprintf("%q:%d", e.Name, e.Size))
	}
	for _, e := range ents {
		fi, _ := e.Info()
		o = append(o, fmt.Sprintf("%q:%d", e.Name(), fi.Size()))
	}
	sort.Strings(o)
	sort.Strings(z)
	if strings.Join(z, " ") != strings.Join(o, " ") {
		d.fail("list: zonefold %v, os %v", z, o)
	}
}

var h19bNames = []string{"a", "b", "c", "sp ace", "nl\nx", "\xff\xfe", strings.Repeat("L", 255), strings.Repeat("M", 256), "-", ". dot", "tab\t"}

func (d *h19bDiff) pickHandle() *h19bHandle {
	if len(d.hs) == 0 {
		return nil
	}
	return d.hs[d.rng.Intn(len(d.hs))]
}

func (d *h19bDiff) randOff() int64 {
	switch d.rng.Intn(10) {
	case 0:
		return d.rng.Int63n(1 << 30)
	case 1:
		return d.rng.Int63n(8 << 20)
	default:
		return d.rng.Int63n(64 << 10)
	}
}

func (d *h19bDiff) randData() []byte {
	n := d.rng.Intn(20000) + 1
	if d.rng.Intn(8) == 0 {
		n = d.rng.Intn(3) + 1
	}
	p := make([]byte, n)
	d.rng.Read(p)
	return p
}

// step runs one random operation.
func (d *h19bDiff) step() {
	d.t.Helper()
	rng := d.rng
	ci := rng.Intn(len(d.clients))
	name := h19bNames[rng.Intn(len(h19bNames))]
	h := d.pickHandle()
	switch k := rng.Intn(100); {
	case k < 14 || h == nil:
		flags := []uint8{0, OpenCreate, OpenCreate, OpenCreate | OpenTrunc, OpenCreate | OpenExcl, OpenTrunc}[rng.Intn(6)]
		if len(d.hs) < 12 {
			d.open(ci, name, flags)
		}
	case k < 40:
		d.write(h, d.randOff(), d.randData())
	case k < 62:
		off := d.randOff()
		if fi, err := h.osf.Stat(); err == nil && fi.Size() > 0 && rng.Intn(2) == 0 {
			off = rng.Int63n(fi.Size() + 100)
		}
		d.read(h, off, rng.Intn(70000)+1)
	case k < 66:
		d.truncate(h, d.randOff())
	case k < 68:
		d.zeroLen(h, []Op{OpRead, OpWrite}[rng.Intn(2)], d.randOff())
	case k < 71:
		d.fsync(h)
	case k < 75:
		d.fstat(h)
	case k < 80:
		d.close(h)
	case k < 85:
		d.remove(ci, name)
	case k < 91:
		d.rename(ci, name, h19bNames[rng.Intn(len(h19bNames))])
	case k < 96:
		d.stat(ci, name)
	default:
		d.list(ci)
	}
}

// h19bSeeds is how many seeds a sweep runs: one by default, all of full
// with H19B_SWEEP=1 (minutes).
func h19bSeeds(full int64) int64 {
	if os.Getenv("H19B_SWEEP") == "" {
		return 1
	}
	return full
}

func TestH19bDifferentialSweep(t *testing.T) {
	for seed := int64(1); seed <= h19bSeeds(40); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			dm := newDaemon(t)
			d := newH19bDiff(t, dm.socket, 3, seed)
			for range 1000 {
				d.step()
			}
		})
	}
}

// compareAll checks every file: the listing, then each file's bytes where
// the os file has data, and a few reads in its holes.
func (d *h19bDiff) compareAll(c *Client) {
	d.t.Helper()
	d.list(0)
	ents, _ := os.ReadDir(d.dir)
	for _, e := range ents {
		name := e.Name()
		osf, err := os.Open(filepath.Join(d.dir, name))
		if err != nil {
			d.t.Fatal(err)
		}
		fi, _ := osf.Stat()
		size := fi.Size()
		zh, zsize, err := c.Open(d.ctx, name, 0)
		if err != nil {
			d.fail("after restart: open %q: %v", name, err)
		}
		if zsize != size {
			d.fail("after restart: %q size %d, os %d", name, zsize, size)
		}
		cmp := func(off, n int64) {
			zb, ob := make([]byte, n), make([]byte, n)
			zn, _ := c.ReadAt(d.ctx, zh, zb, off)
			on, _ := osf.ReadAt(ob, off)
			if zn != on {
				d.fail("after restart: %q read off %d len %d: zonefold %d bytes, os %d", name, off, n, zn, on)
			}
			if i := firstDiff(zb[:zn], ob[:on]); i >= 0 {
				d.fail("after restart: %q at %d: zonefold %#x, os %#x", name, off+int64(i), zb[i], ob[i])
			}
		}
		for off := int64(0); off < size; {
			data, err := unixSeek(osf, off, 3) // SEEK_DATA
			if err != nil {
				break
			}
			hole, _ := unixSeek(osf, data, 4) // SEEK_HOLE
			if data > off {
				cmp(off+(data-off)/2, min(4096, data-off-(data-off)/2))
			}
			for p := data; p < hole; p += 1 << 20 {
				cmp(p, min(1<<20, hole-p))
			}
			off = hole
		}
		cmp(max(0, size-5000), 10000)
		c.CloseFile(d.ctx, zh)
		osf.Close()
	}
}

func unixSeek(f *os.File, off int64, whence int) (int64, error) {
	return syscall.Seek(int(f.Fd()), off, whence)
}

// restartClean stops the daemon with handles open on every client, checks
// that the old clients' handles fail, serves the device again and checks
// that everything is there (a clean stop writes everything back).
func (d *h19bDiff) restartClean(dm *daemon, cfg RunConfig) *daemon {
	d.t.Helper()
	d.note("restart")
	if err := dm.stop(d.t); err != nil {
		d.t.Fatal(err)
	}
	cfg.Format = false
	dm = startDaemon(d.t, cfg)
	for _, h := range d.hs {
		p := make([]byte, 100)
		for i := range p {
			p[i] = 0xee
		}
		n, err := d.clients[h.client].ReadAt(d.ctx, h.zh, p, 0)
		if err == nil || errors.Is(err, io.EOF) {
			d.fail("old client h%d read after restart: %d bytes, err %v", h.zh, n, err)
		}
		if n, err := d.clients[h.client].WriteAt(d.ctx, h.zh, p, 0); err == nil {
			d.fail("old client h%d write after restart: %d bytes, no error", h.zh, n)
		}
		h.osf.Close()
	}
	d.hs = nil
	for i, c := range d.clients {
		c.Close()
		if i == 2 {
			d.clients[i] = dialFraming(d.t, dm.socket)
		} else {
			d.clients[i] = dial(d.t, dm.socket)
		}
	}
	d.compareAll(d.clients[0])
	return dm
}

func TestH19bDifferentialRestartSweep(t *testing.T) {
	for seed := int64(100); seed < 100+h19bSeeds(15); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			cfg := testConfig(emuDevice(t), filepath.Join(t.TempDir(), "zf.sock"))
			dm := startDaemon(t, cfg)
			d := newH19bDiff(t, dm.socket, 3, seed)
			for round := range 3 {
				for range 300 {
					d.step()
				}
				d.compareAll(d.clients[round%3])
				dm = d.restartClean(dm, cfg)
			}
		})
	}
}
