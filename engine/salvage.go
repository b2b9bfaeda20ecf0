package engine

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/uring"
	"github.com/zonefold/zonefold/zns"
)

// SalvageReport is what Salvage copied and what it could not.
type SalvageReport struct {
	// Fsck is fsck's report of the state Salvage recovered: its
	// Problems say what recovery went past (the newest checkpoint or
	// the log before it damaged, what was logged after the checkpoint
	// it started from therefore lost) and what no record verifies.
	// Without Fsck.Recovered, recovery found no state to copy from
	// (Fsck.Problems say why): Files is empty and nothing was copied,
	// which is no copy of every file.
	Fsck  *FsckReport
	Files []SalvagedFile
}

// SalvagedFile is one file Salvage handed to its sink.
type SalvagedFile struct {
	Name string
	Size int64
	// Holes are the ranges whose bytes Salvage could not verify: it
	// wrote nothing there (zeros in a new file).
	Holes []SalvageHole
	// Err is why the sink refused the file (nothing of it was
	// copied). After a copy that stopped (Salvage's error), it is also
	// why, for the file the copy stopped in (the sink may hold part of
	// it, for the caller to remove; Holes is empty), and, for each
	// file after that one, that the copy never reached it
	// (errNotReached).
	Err error
}

// SalvageHole is a range of a file not recovered, and why.
type SalvageHole struct {
	Off, Len int64
	Why      string
}

// Complete reports whether Salvage recovered everything: no damage, no
// hole, and every file copied.
func (r *SalvageReport) Complete() bool {
	if r.Fsck == nil || !r.Fsck.Recovered || len(r.Fsck.Problems) > 0 {
		return false
	}
	for _, f := range r.Files {
		if f.Err != nil || len(f.Holes) > 0 {
			return false
		}
	}
	return true
}

// errNotReached is a SalvagedFile's Err after the file a copy stopped in.
var errNotReached = errors.New("the copy stopped before it")

// lostTableInferred is the problem a salvage of a device whose zone
// table was lost (zns.Options.InferLostTable) reports first.
const lostTableInferred = "the device's zone table is lost (neither emu header slot holds a valid one: zeros, or garbage over a zonefold device): salvage inferred each zone's write pointer from the file's data (a zone holding data as written up to where its data ends, one without as empty), never writing it; " +
	"what a zone held before a reset may lie past its real end (damage reported here in such a tail is that), and only bytes a record verifies (its file, offset, version and checksums) are copied"

// Salvage copies every file it can recover off dev, never writing it.
// It recovers in memory as Fsck does, but goes on past what makes Open
// refuse the device (a newest checkpoint, or the log before it, that is
// damaged): from the newest checkpoint that decodes, the log after it up
// to the damage, and the data records newer than it. For each file, in
// name order, it calls create with the file's name and size, writes
// through the io.WriterAt it returns only bytes it verified as fsck
// does (fsckState.checkExtent), and closes it if it is an io.Closer.
// Verified: each mapped extent lies in a record whose header holds and
// carries the same file, offset and version, and each block's checksum
// passed in fsck's walk and passes again on the read that copies it. What it cannot verify, it does not write: a hole, listed in
// the report with why. An older checkpoint's extent in a zone reset and
// reused since holds another file's record, so it is a hole, never that
// file's bytes. A create error skips the file (SalvagedFile.Err); the
// error Salvage returns is one reading the device or writing a copy,
// with the report of the files copied before it, the one it stopped in
// and those after it, each with its Err. A device whose zone
// table its Open inferred from the data (zns.TableInferrer, the table
// lost) is damaged: the report says so first (lostTableInferred).
func Salvage(dev zns.Device, create func(name string, size int64) (io.WriterAt, error)) (*SalvageReport, error) {
	rep, st, err := fsck(dev, FsckOptions{}, true)
	if err != nil {
		if tableInferred(dev) {
			return nil, inferredGeometryError(dev, err)
		}
		return nil, err
	}
	if tableInferred(dev) {
		rep.Problems = append([]string{lostTableInferred}, rep.Problems...)
		if st == nil && rep.Superblock.checkGeometry(dev.Geometry()) != nil {
			rep.Problems = append(rep.Problems, geometryHint(dev, rep.Superblock, -1))
		}
	}
	out := &SalvageReport{Fsck: rep}
	if st == nil {
		return out, nil // recovery found nothing to start from: the report says why
	}
	defer st.close()
	files := make([]*file, 0, len(st.e.byName))
	for _, f := range st.e.byName {
		files = append(files, f)
	}
	slices.SortFunc(files, func(a, b *file) int {
		if a.name() < b.name() {
			return -1
		}
		if a.name() > b.name() {
			return 1
		}
		return 0
	})
	for i, f := range files {
		sf := SalvagedFile{Name: f.name(), Size: max(f.size, 0)}
		wa, err := create(sf.Name, sf.Size)
		if err != nil {
			sf.Err = err
			out.Files = append(out.Files, sf)
			continue
		}
		err = st.salvageFile(f, wa, &sf)
		if c, ok := wa.(io.Closer); ok {
			if cerr := c.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			// out holds the files copied before this one, this one
			// and the ones after it not copied, each named. This
			// one is not kept (the caller removes the part copied):
			// no range of it to report as a hole.
			sf.Err, sf.Holes = err, nil
			out.Files = append(out.Files, sf)
			for _, g := range files[i+1:] {
				out.Files = append(out.Files, SalvagedFile{Name: g.name(), Size: max(g.size, 0),
					Err: fmt.Errorf("%w (in %q)", errNotReached, sf.Name)})
			}
			return out, fmt.Errorf("engine: salvage: copying %q: %w", sf.Name, err)
		}
		out.Files = append(out.Files, sf)
	}
	return out, nil
}

// salvageFile writes what of f's extents it verifies to wa, and adds the
// rest to sf.Holes.
func (st *fsckState) salvageFile(f *file, wa io.WriterAt, sf *SalvagedFile) error {
	size := sf.Size
	hole := func(off, n int64, why string) {
		n = min(off+n, size) - off
		if n <= 0 {
			return
		}
		if k := len(sf.Holes); k > 0 && sf.Holes[k-1].Off+sf.Holes[k-1].Len == off && sf.Holes[k-1].Why == why {
			sf.Holes[k-1].Len += n
			return
		}
		sf.Holes = append(sf.Holes, SalvageHole{Off: off, Len: n, Why: why})
	}
	var werr error
	f.ext.each(func(x extent) bool {
		if x.off >= size {
			return false
		}
		c := st.checkExtent(f, x)
		switch {
		case c.offline != nil:
			hole(x.off, x.len, fmt.Sprintf("its zone %d is offline", c.zone))
			return true
		case !c.carried:
			hole(x.off, x.len, fmt.Sprintf("no record at device offset %d carries version %d of it (damaged, or a zone reset and reused since the checkpoint salvage started from)", x.dev, x.ver))
			return true
		}
		werr = st.copyExtent(f.id, x, c.bad, size, wa, hole)
		return werr == nil
	})
	return werr
}

// copyExtent reads carried extent x (its blocks in bad failing) and
// writes it, up to size, to wa. It checks each block it reads against
// its record's checksum again (the media may have changed since fsck's
// walk): what fails to read or to match is a hole.
func (st *fsckState) copyExtent(id uint64, x extent, bad []int64, size int64, wa io.WriterAt, hole func(off, n int64, why string)) error {
	sums, err := st.recordSums(id, x)
	if err != nil {
		return err
	}
	if sums == nil {
		hole(x.off, x.len, "its record's header no longer reads whole, or no longer carries it")
		return nil
	}
	isBad := map[int64]bool{}
	for _, b := range bad {
		isBad[b] = true
	}
	chunk := int64(len(st.buf.mem)) / BlockSize * BlockSize
	for done := int64(0); done < x.len && x.off+done < size; {
		if isBad[x.dev+done] {
			hole(x.off+done, BlockSize, "its block fails its checksum or fails to read")
			done += BlockSize
			continue
		}
		n := int64(0) // a run of blocks fsck found good, at most a chunk
		for n < min(chunk, x.len-done) && !isBad[x.dev+done+n] {
			n += BlockSize
		}
		data := st.buf.mem[:n]
		rerr := st.e.readDev(x.dev+done, data, st.w)
		if rerr != nil && !errors.Is(rerr, syscall.EIO) {
			return fmt.Errorf("engine: salvage: read device offset %d: %w", x.dev+done, rerr)
		}
		from := int64(-1) // the run of verified blocks not yet written
		write := func(to int64) error {
			if from < 0 {
				return nil
			}
			off := x.off + done + from
			end := min(x.off+done+to, size)
			from = -1
			if end <= off {
				return nil
			}
			if _, err := wa.WriteAt(data[off-(x.off+done):end-(x.off+done)], off); err != nil {
				return fmt.Errorf("engine: salvage: write bytes %d..%d: %w", off, end, err)
			}
			return nil
		}
		for b := int64(0); b < n; b += BlockSize {
			why := ""
			if rerr != nil {
				// Block by block: what fails to read since fsck's
				// walk is a hole.
				if err := st.e.readDev(x.dev+done+b, data[b:b+BlockSize], st.w); err != nil {
					if !errors.Is(err, syscall.EIO) {
						return fmt.Errorf("engine: salvage: read device offset %d: %w", x.dev+done+b, err)
					}
					why = "its block fails to read"
				}
			}
			if why == "" && badBlock(data[b:b+BlockSize], sums[(done+b)/BlockSize:]) == 0 {
				why = "its block no longer matches its checksum"
			}
			if why == "" {
				if from < 0 {
					from = b
				}
				continue
			}
			if err := write(b); err != nil {
				return err
			}
			hole(x.off+done+b, BlockSize, why)
		}
		if err := write(n); err != nil {
			return err
		}
		done += n
	}
	return nil
}

// recordSums reads the header of x's record again and returns the
// checksums of x's blocks, or nil if it no longer reads or decodes, or
// no longer carries x for file id (another record is there now: its
// sums would pass another file's bytes).
func (st *fsckState) recordSums(id uint64, x extent) ([]uint32, error) {
	if st.hb == nil {
		hb, err := newScanBuf(BlockSize)
		if err != nil {
			return nil, err
		}
		st.hb = hb
	}
	hb := st.hb.mem[:BlockSize]
	if err := st.e.readDev(x.hdr, hb, st.w); err != nil {
		if errors.Is(err, syscall.EIO) {
			return nil, nil
		}
		return nil, fmt.Errorf("engine: salvage: read device offset %d: %w", x.hdr, err)
	}
	var h RecordHeader
	first, n := x.firstBlock(), int(x.len/BlockSize)
	if err := DecodeHeader(hb, &h); err != nil || h.FS != st.e.sb.FS() || first+n > len(h.Sums) {
		return nil, nil
	}
	if !slices.ContainsFunc(recordPieces(&h, x.hdr), func(p fsckPiece) bool { return p.carries(id, x) }) {
		return nil, nil
	}
	return slices.Clone(h.Sums[first : first+n]), nil
}

// inferredGeometryError is why a salvage of dev, whose zone table was
// inferred (the table lost), could not read its superblock (err). With
// the table, the device lost its geometry, so dev's is the device
// string's alone, and one the device was not formatted with puts the
// metadata zones elsewhere ("superblock names metadata zones [2 3], the
// device's are [0 1]") or finds no superblock there at all (which
// ErrNotFormatted's advice, to format, would erase). It looks for a
// superblock copy at each zone start of the geometry given: one that
// reads names the parameters that differ; none, and a missing
// superblock, says which to check. Any other err is returned as it is.
func inferredGeometryError(dev zns.Device, err error) error {
	sb, at, found := findSuperblock(dev)
	if found && sb.checkGeometry(dev.Geometry()) == nil && sb.MetaZones[0] == firstSequential(dev) {
		found = false // it agrees with the geometry given: no clue
	}
	// ErrNotFormatted's text, advising a format, is left out: the
	// device is damaged, not blank, and a format would erase it.
	switch {
	case found && errors.Is(err, ErrNotFormatted):
		return fmt.Errorf("engine: no zonefold superblock reads where the geometry given puts the metadata zones: %s", geometryHint(dev, sb, at))
	case found:
		return fmt.Errorf("engine: %s: %w", geometryHint(dev, sb, at), err)
	case errors.Is(err, ErrNotFormatted):
		g := dev.Geometry()
		return fmt.Errorf("engine: no zonefold superblock reads where the geometry given puts the metadata zones, nor at any other zone start: the device's zone table is lost, and with it its geometry, "+
			"so the geometry given (conv=%d, zone_size=%d, zones=%d, zone_cap=%d) may not be the one the device was formatted with: "+
			"check conv (the conventional zones before the metadata zones) and zone_size first, then zones and zone_cap; nothing was written, and formatting would erase what is left",
			firstSequential(dev), g.ZoneSize, g.Zones, g.ZoneCap)
	}
	return err
}

// geometryHint says which parameters of the device string differ from
// those superblock sb (read at device byte at, or -1: where recovery
// read it) was formatted with.
func geometryHint(dev zns.Device, sb Superblock, at int64) string {
	g := dev.Geometry()
	var diff []string
	if conv := firstSequential(dev); sb.MetaZones[0] != conv {
		diff = append(diff, fmt.Sprintf("conv=%d (given %d)", sb.MetaZones[0], conv))
	}
	if sb.ZoneSize != g.ZoneSize {
		diff = append(diff, fmt.Sprintf("zone_size=%d (given %d)", sb.ZoneSize, g.ZoneSize))
	}
	if sb.Zones != g.Zones {
		diff = append(diff, fmt.Sprintf("zones=%d (given %d)", sb.Zones, g.Zones))
	}
	if sb.ZoneCap != g.ZoneCap {
		diff = append(diff, fmt.Sprintf("zone_cap=%d (given %d)", sb.ZoneCap, g.ZoneCap))
	}
	where := "the superblock"
	if at >= 0 {
		where = fmt.Sprintf("a superblock copy at device byte %d", at)
	}
	return fmt.Sprintf("the device's zone table is lost, and with it its geometry, so the geometry given may not be the one the device was formatted with: %s says %s; "+
		"give those in the device string and run the salvage again (nothing was written)", where, strings.Join(diff, ", "))
}

// firstSequential is dev's first sequential zone: the conventional
// zones before it are an emu device string's conv.
func firstSequential(dev zns.Device) int {
	g := dev.Geometry()
	report := make([]zns.Zone, g.Zones)
	n, err := dev.Report(0, report)
	if err != nil {
		return 0
	}
	for i, z := range report[:n] {
		if z.Type != zns.TypeConventional {
			return i
		}
	}
	return n
}

// findSuperblock is the first superblock copy that decodes at a zone
// start of dev's geometry (zones that fail to read are passed), and the
// device byte it is at.
func findSuperblock(dev zns.Device) (Superblock, int64, bool) {
	g := dev.Geometry()
	buf, err := unix.Mmap(-1, 0, BlockSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return Superblock{}, 0, false
	}
	defer unix.Munmap(buf)
	w := uring.NewWaiter()
	for z := range min(g.Zones, superblockZones) {
		at := int64(z) * g.ZoneSize
		err := dev.Read(at, buf, w)
		if err == nil {
			err = dev.Ring().Wait(w).Err("read superblock")
		}
		if err != nil {
			continue
		}
		if sb, err := decodeSuperblock(buf); err == nil {
			return sb, at, true
		}
	}
	return Superblock{}, 0, false
}
