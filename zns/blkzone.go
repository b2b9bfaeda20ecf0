package zns

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Linux zoned block device ioctls (include/uapi/linux/blkzoned.h);
// golang.org/x/sys/unix does not define them.
const (
	ioctlReportZone = 0xc0101282
	ioctlResetZone  = 0x40101283
	ioctlOpenZone   = 0x40101286
	ioctlCloseZone  = 0x40101287
	ioctlFinishZone = 0x40101288

	blkZoneRepCapacity = 1 // struct blk_zone_report flags: capacity is valid
	blkZoneRepHdr      = 16
	blkZoneLen         = 64
)

// zoneAction is a zone management request, by ioctl and by NVMe action.
type zoneAction struct {
	name  string
	ioctl uintptr
	nvme  uint32 // Zone Management Send action
}

var (
	actReset  = zoneAction{"reset", ioctlResetZone, 0x04}
	actOpen   = zoneAction{"open", ioctlOpenZone, 0x03}
	actClose  = zoneAction{"close", ioctlCloseZone, 0x01}
	actFinish = zoneAction{"finish", ioctlFinishZone, 0x02}
)

// checkAction checks a management request against a zone's current
// condition so that an invalid one is refused, typed, before the device
// sees it. skip is true when the request is a no-op in that condition.
func checkAction(a zoneAction, zone int, z Zone) (skip bool, err error) {
	if z.Type == TypeConventional {
		return false, fmt.Errorf("zns: %s zone %d: %w", a.name, zone, ErrConventional)
	}
	if z.Cond == CondReadOnly || z.Cond == CondOffline {
		return false, fmt.Errorf("zns: %s zone %d (%s): %w", a.name, zone, z.Cond, ErrReadOnly)
	}
	switch a {
	case actOpen:
		if z.Cond == CondFull {
			return false, fmt.Errorf("zns: open zone %d: %w", zone, ErrZoneFull)
		}
		return z.Cond == CondExpOpen, nil
	case actClose:
		if z.Cond == CondEmpty || z.Cond == CondFull {
			return false, fmt.Errorf("zns: close zone %d (%s): %w", zone, z.Cond, ErrBadTransition)
		}
		return z.Cond == CondClosed, nil
	case actFinish:
		return z.Cond == CondFull, nil
	}
	return false, nil
}

// zoneMgmtErr types the errno of a refused zone management request.
func zoneMgmtErr(a zoneAction, zone int, err error) error {
	if e, ok := err.(syscall.Errno); ok {
		if typed := errnoZoneErr(e); typed != nil {
			return fmt.Errorf("zns: %s zone %d: %w: %w", a.name, zone, typed, err)
		}
	}
	return fmt.Errorf("zns: %s zone %d: %w", a.name, zone, err)
}

func ioctlPtr(fd int, req uintptr, p unsafe.Pointer) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(p))
	if e != 0 {
		return e
	}
	return nil
}

// blkZoneMgmt issues a BLK*ZONE ioctl for one zone (in 512-byte sectors).
func blkZoneMgmt(fd int, a zoneAction, sector, sectors uint64) error {
	rng := [2]uint64{sector, sectors} // struct blk_zone_range
	return ioctlPtr(fd, a.ioctl, unsafe.Pointer(&rng[0]))
}

// blkReportZones reads up to len(out) zones starting at sector into out,
// in bytes, and returns how many it read.
func blkReportZones(fd int, sector uint64, out []Zone) (int, error) {
	if len(out) == 0 {
		return 0, nil
	}
	buf := make([]byte, blkZoneRepHdr+blkZoneLen*len(out))
	le := binary.LittleEndian
	le.PutUint64(buf, sector)
	le.PutUint32(buf[8:], uint32(len(out)))
	if err := ioctlPtr(fd, ioctlReportZone, unsafe.Pointer(&buf[0])); err != nil {
		return 0, fmt.Errorf("BLKREPORTZONE at sector %d: %w", sector, err)
	}
	n := int(le.Uint32(buf[8:]))
	capValid := le.Uint32(buf[12:])&blkZoneRepCapacity != 0
	for i := range min(n, len(out)) {
		b := buf[blkZoneRepHdr+blkZoneLen*i:]
		z := Zone{
			Start: int64(le.Uint64(b)) << 9,
			Len:   int64(le.Uint64(b[8:])) << 9,
			WP:    int64(le.Uint64(b[16:])) << 9,
			Type:  Type(b[24]),
			Cond:  Cond(b[25]),
		}
		z.Cap = z.Len
		if capValid {
			z.Cap = int64(le.Uint64(b[32:])) << 9
		}
		out[i] = normalizeZone(z)
	}
	return min(n, len(out)), nil
}

// normalizeZone makes a reported zone follow Zone's conventions: a full
// zone's write pointer is Start+Cap (Linux reports Start+Len), and a
// conventional zone's is its start.
func normalizeZone(z Zone) Zone {
	switch {
	case z.Type == TypeConventional:
		z.WP = z.Start
	case z.Cond == CondFull:
		z.WP = z.Start + z.Cap
	}
	return z
}

// sysfsQueue reads the queue/ attributes of a block device.
type sysfsQueue string

func blockQueueDir(fd int, path string) (sysfsQueue, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", fmt.Errorf("zns: stat %s: %w", path, err)
	}
	dir := fmt.Sprintf("/sys/dev/block/%d:%d/queue", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	return sysfsQueue(dir), nil
}

func (q sysfsQueue) str(attr string) (string, error) {
	b, err := os.ReadFile(filepath.Join(string(q), attr))
	if err != nil {
		return "", fmt.Errorf("zns: read sysfs %s: %w", attr, err)
	}
	return strings.TrimSpace(string(b)), nil
}

func (q sysfsQueue) int(attr string) (int64, error) {
	s, err := q.str(attr)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("zns: sysfs %s: %w", attr, err)
	}
	return n, nil
}

// queueGeometry reads a zoned block device's geometry from sysfs: what is
// common to the block device and the NVMe passthrough backends. The zone
// capacity comes from the caller's zone report.
func queueGeometry(q sysfsQueue, path string) (Geometry, error) {
	var g Geometry
	zoned, err := q.str("zoned")
	if err != nil {
		return g, err
	}
	if zoned == "none" {
		return g, fmt.Errorf("zns: %s is not zoned (sysfs queue/zoned: none; for an emulated zoned device use emu:%s?zone_size=..&zones=..): %w", path, path, ErrNotZoned)
	}
	vals := map[string]int64{}
	for _, attr := range []string{"chunk_sectors", "nr_zones", "max_open_zones", "max_active_zones", "zone_append_max_bytes", "logical_block_size", "max_sectors_kb"} {
		if vals[attr], err = q.int(attr); err != nil {
			return g, err
		}
	}
	g = Geometry{
		Zones:     int(vals["nr_zones"]),
		ZoneSize:  vals["chunk_sectors"] << 9,
		BlockSize: int(vals["logical_block_size"]),
		MaxOpen:   int(vals["max_open_zones"]),
		MaxActive: int(vals["max_active_zones"]),
	}
	if g.BlockSize != 512 && g.BlockSize != 4096 {
		return g, fmt.Errorf("zns: %s: unsupported logical block size %d (want 512 or 4096)", path, g.BlockSize)
	}
	if g.Zones <= 0 || g.ZoneSize <= 0 {
		return g, fmt.Errorf("zns: %s: no zones (nr_zones %d, chunk_sectors %d)", path, g.Zones, vals["chunk_sectors"])
	}
	// A write larger than max_sectors_kb would be split, and the pieces
	// of one zone write must not be reordered; appends have their own cap.
	maxIO := vals["max_sectors_kb"] << 10
	if a := vals["zone_append_max_bytes"]; a > 0 {
		maxIO = min(maxIO, a)
	}
	g.MaxAppend = int(maxIO / int64(g.BlockSize) * int64(g.BlockSize))
	if g.MaxAppend < g.BlockSize {
		return g, fmt.Errorf("zns: %s: max I/O size %d is below the block size", path, maxIO)
	}
	return g, nil
}
