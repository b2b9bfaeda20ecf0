package bench

// The device side of bench peers: which devices it accepts, the device's
// own written-bytes counter that every row's WAF comes from, and the
// kernel's dirty page limits that stand in for zonefold's cache size.

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/prometheus/procfs"
	"github.com/prometheus/procfs/blockdevice"
	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/zns"
)

// peerDevice is the zoned block device bench peers erases and uses.
type peerDevice struct {
	path string // as given, e.g. /dev/nullb0
	name string // nullb0
	sys  blockdevice.FS
	geo  zns.Geometry
	conv int          // conventional zones
	last atomic.Int64 // the counter's last reading
}

// openPeerDevice checks that path is a zoned block device bench peers may
// erase: run as root, not mounted, and — unless force — holding no file
// system or data (a zonefold superblock, a known file system's signature,
// or any sequential zone written).
func openPeerDevice(path string, force bool) (*peerDevice, error) {
	// emu: and null: devices, which every other command takes, are no
	// block devices for the kernel's file systems to be made on: said
	// before root is asked for, since root would not help.
	const needBlock = "bench peers needs a zoned block device, as the kernel's file systems do (e.g. /dev/nullb0, /dev/nvme0n1); without one, make bench-peers runs it in a VM on null_blk"
	if strings.HasPrefix(path, "emu:") || strings.HasPrefix(path, "null:") {
		return nil, fmt.Errorf("%s: %s", path, needBlock)
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("bench peers makes and mounts file systems: run it as root")
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("DEVICE: %w", err)
	}
	if st.Mode()&os.ModeDevice == 0 || st.Mode()&os.ModeCharDevice != 0 {
		return nil, fmt.Errorf("%s is not a block device: %s", path, needBlock)
	}
	d := &peerDevice{path: path, name: blockName(path)}
	if d.sys, err = blockdevice.NewFS("/proc", "/sys"); err != nil {
		return nil, err
	}
	zoned, err := os.ReadFile(filepath.Join("/sys/block", d.name, "queue", "zoned"))
	if err != nil {
		return nil, fmt.Errorf("%s: not a whole block device (no /sys/block/%s): %w", path, d.name, err)
	}
	if z := strings.TrimSpace(string(zoned)); z == "none" {
		return nil, fmt.Errorf("%s is not zoned (queue/zoned is %q)", path, z)
	}
	if err := d.checkNotMounted(st); err != nil {
		return nil, err
	}
	if err := d.readGeometry(); err != nil {
		return nil, err
	}
	if _, err := d.written(); err != nil {
		return nil, err
	}
	if err := d.erasable(force); err != nil {
		return nil, err
	}
	return d, nil
}

// erasable refuses, unless force, a device that holds a file system or
// data (see contents), naming what it holds.
func (d *peerDevice) erasable(force bool) error {
	if force {
		return nil
	}
	if what := d.contents(); what != "" {
		return fmt.Errorf("%s holds %s: bench peers erases it; --force to go ahead", d.path, what)
	}
	return nil
}

// checkNotMounted refuses a device something has mounted, even with
// --force: erasing it under a mounted file system would corrupt that.
func (d *peerDevice) checkNotMounted(st os.FileInfo) error {
	sys, ok := st.Sys().(*unix.Stat_t)
	if !ok {
		return nil
	}
	want := fmt.Sprintf("%d:%d", unix.Major(uint64(sys.Rdev)), unix.Minor(uint64(sys.Rdev)))
	mounts, err := procfs.GetMounts()
	if err != nil {
		return fmt.Errorf("read mounts: %w", err)
	}
	for _, m := range mounts {
		if m.MajorMinorVer == want {
			return fmt.Errorf("%s is mounted on %s: unmount it first", d.path, m.MountPoint)
		}
	}
	return nil
}

// signatures are file system magics at fixed offsets, for the refusal
// message (the zone check below catches any file system anyway).
var signatures = []struct {
	name  string
	off   int64
	magic []byte
}{
	{"an f2fs file system", 1024, []byte{0x10, 0x20, 0xf5, 0xf2}},
	{"a btrfs file system", 65536 + 64, []byte("_BHRfS_M")},
	// zoned btrfs logs its superblock in zones 0 and 1; on a conventional
	// zone 0 it sits at the zone's start
	{"a btrfs file system", 64, []byte("_BHRfS_M")},
	{"an XFS file system", 0, []byte("XFSB")},
	{"an ext2/3/4 file system", 1080, []byte{0x53, 0xef}},
}

// zonefoldMagic starts a zonefold superblock block ("FJSB", little
// endian), at the start of a metadata zone.
var zonefoldMagic = []byte{0x46, 0x4a, 0x53, 0x42}

// contents says what the device holds ("" for nothing bench peers would
// destroy): a zonefold superblock at the start of its metadata zones (the
// first two sequential ones), else a file system signature (checked
// second: zonefold leaves the conventional zones, and so an earlier file
// system's superblock there, alone), else the first written sequential
// zone. A plain file (in tests) has no zones: only signatures count.
func (d *peerDevice) contents() string {
	f, err := os.Open(d.path)
	if err != nil {
		return ""
	}
	defer f.Close()
	written := -1
	if dev, err := zns.Open(d.path, zns.Options{}); err == nil {
		zones := make([]zns.Zone, dev.Geometry().Zones)
		n, rerr := dev.Report(0, zones)
		dev.Close()
		if rerr != nil {
			n = 0
		}
		buf := make([]byte, 4096)
		seq := 0
		for i, z := range zones[:n] {
			if z.Type == zns.TypeConventional {
				continue
			}
			seq++
			if z.WP == z.Start {
				continue
			}
			if seq <= 2 {
				if _, err := f.ReadAt(buf, z.Start); err == nil && bytes.Equal(buf[:4], zonefoldMagic) {
					return "a zonefold file system"
				}
			}
			if written < 0 {
				written = i
			}
		}
	}
	head := make([]byte, 128<<10)
	n, _ := f.ReadAt(head, 0)
	head = head[:n]
	for _, s := range signatures {
		if int(s.off)+len(s.magic) <= len(head) && bytes.Equal(head[s.off:int(s.off)+len(s.magic)], s.magic) {
			return s.name
		}
	}
	if written >= 0 {
		return fmt.Sprintf("data (zone %d is written)", written)
	}
	return ""
}

// readGeometry takes the zone geometry and counts the conventional zones.
func (d *peerDevice) readGeometry() error {
	dev, err := zns.Open(d.path, zns.Options{})
	if err != nil {
		return err
	}
	defer dev.Close()
	d.geo = dev.Geometry()
	zones := make([]zns.Zone, d.geo.Zones)
	n, err := dev.Report(0, zones)
	if err != nil {
		return fmt.Errorf("%s: report zones: %w", d.path, err)
	}
	for _, z := range zones[:n] {
		if z.Type == zns.TypeConventional {
			d.conv++
		}
	}
	return nil
}

// describe is the geometry for the output.
func (d *peerDevice) describe() string {
	g := d.geo
	s := fmt.Sprintf("%d zones of %s (%d conventional), %s", g.Zones, human(g.ZoneSize), d.conv, human(int64(g.Zones)*g.ZoneSize))
	if g.ZoneCap != g.ZoneSize {
		s += fmt.Sprintf(", zone capacity %s", human(g.ZoneCap))
	}
	if g.MaxOpen > 0 || g.MaxActive > 0 {
		s += fmt.Sprintf(", max open %d, max active %d", g.MaxOpen, g.MaxActive)
	}
	return s
}

// resetZones empties every sequential zone.
func (d *peerDevice) resetZones() error {
	dev, err := zns.Open(d.path, zns.Options{})
	if err != nil {
		return err
	}
	if err := dev.ResetAll(); err != nil {
		dev.Close()
		return fmt.Errorf("%s: reset zones: %w", d.path, err)
	}
	return dev.Close()
}

// written is the bytes the device has completed writing since boot
// (/sys/block/NAME/stat, sectors written × 512): what every row's WAF is
// computed from, zonefold's included.
func (d *peerDevice) written() (int64, error) {
	st, _, err := d.sys.SysBlockDeviceStat(d.name)
	if err != nil {
		return 0, fmt.Errorf("%s: read the device's write counter: %w", d.path, err)
	}
	return int64(st.WriteSectors) * 512, nil
}

// counter is written for Counters, which cannot fail: a failed read (the
// device went away) keeps the last reading and is logged.
func (d *peerDevice) counter() int64 {
	n, err := d.written()
	if err != nil {
		slog.Warn("bench peers: device counter", "err", err)
		return d.last.Load()
	}
	d.last.Store(n)
	return n
}

// dirtyLimit caps the kernel's dirty page cache, as zonefold's --cache
// caps its own: without it the guest's page cache would absorb most
// overwrites of a small data set, and the kernel file systems' WAF would
// measure the cache, not the file system. restore puts the old values back.
func dirtyLimit(limit int64) (restore func() error, err error) {
	const bytesFile, bgFile = "/proc/sys/vm/dirty_bytes", "/proc/sys/vm/dirty_background_bytes"
	const ratioFile, bgRatioFile = "/proc/sys/vm/dirty_ratio", "/proc/sys/vm/dirty_background_ratio"
	// Setting *_bytes zeroes *_ratio and the other way round: remember the
	// one that is set.
	saved := map[string]string{}
	for _, p := range []string{bytesFile, bgFile, ratioFile, bgRatioFile} {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("dirty page limit: %w", err)
		}
		saved[p] = strings.TrimSpace(string(b))
	}
	restore = func() error {
		var errs []error
		for _, pair := range [][2]string{{bytesFile, ratioFile}, {bgFile, bgRatioFile}} {
			p := pair[0]
			if saved[p] == "0" {
				p = pair[1]
			}
			if err := os.WriteFile(p, []byte(saved[p]), 0); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	// The background threshold first: it must stay below the limit.
	if err := os.WriteFile(bgFile, []byte(strconv.FormatInt(max(limit/2, 4096), 10)), 0); err != nil {
		return nil, fmt.Errorf("dirty page limit: %w", err)
	}
	if err := os.WriteFile(bytesFile, []byte(strconv.FormatInt(max(limit, 8192), 10)), 0); err != nil {
		restore()
		return nil, fmt.Errorf("dirty page limit: %w", err)
	}
	return restore, nil
}
