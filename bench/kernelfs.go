package bench

// The kernel's zoned file systems as a workload backend: bench peers runs
// the same workloads through zonefold and through f2fs, btrfs and XFS
// zoned on one zoned block device, and compares write amplification taken
// from the block device's own counter for every row.
//
// A kernelFS is one file system kind; a mountedFS is one made on the
// device and mounted. Its files are ordinary files in the mount, written
// with buffered pwrite and fsync'd where the workload asks for it.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// kernelFS is a kernel zoned file system bench peers can compare with.
type kernelFS struct {
	name string
	// mkfs is the command that makes it on a zoned device; the device is
	// appended.
	mkfs []string
	// minKernel is the first Linux release that mounts it on a zoned
	// device, as major, minor.
	minKernel [2]int
}

// kernelFSes are the peers, in table order.
var kernelFSes = []kernelFS{
	// -m: zoned block device support; f2fs keeps its metadata in the
	// device's conventional zones (it needs at least five).
	{name: "f2fs", mkfs: []string{"mkfs.f2fs", "-f", "-m"}, minKernel: [2]int{4, 10}},
	// Zoned mode; single profiles, since one device cannot hold DUP copies
	// in separate zones any better and RAID profiles need more devices.
	{name: "btrfs", mkfs: []string{"mkfs.btrfs", "-f", "-O", "zoned", "-m", "single", "-d", "single"}, minKernel: [2]int{5, 12}},
	// mkfs.xfs >= 6.15 makes a zoned file system on a zoned device by
	// itself (metadata in the conventional zones, data in the sequential
	// ones); Linux mounts it from 6.15 on.
	{name: "xfs", mkfs: []string{"mkfs.xfs", "-f"}, minKernel: [2]int{6, 15}},
}

func kernelFSByName(name string) (kernelFS, bool) {
	for _, k := range kernelFSes {
		if k.name == name {
			return k, true
		}
	}
	return kernelFS{}, false
}

// unsupported says why this machine cannot run k, or "" if it may: too
// old a kernel, or no mkfs tool. Whether mkfs accepts the device's
// geometry is found out by trying.
func (k kernelFS) unsupported() string {
	if rel, err := kernelRelease(); err == nil {
		if maj, min, ok := parseRelease(rel); ok && (maj < k.minKernel[0] || maj == k.minKernel[0] && min < k.minKernel[1]) {
			return fmt.Sprintf("kernel %s: zoned %s needs Linux >= %d.%d", rel, k.name, k.minKernel[0], k.minKernel[1])
		}
	}
	if _, err := exec.LookPath(k.mkfs[0]); err != nil {
		return k.mkfs[0] + " not found"
	}
	return ""
}

func kernelRelease() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", err
	}
	return unix.ByteSliceToString(u.Release[:]), nil
}

// parseRelease reads "6.1.0-57-amd64" as 6, 1.
func parseRelease(rel string) (major, minor int, ok bool) {
	a, rest, found := strings.Cut(rel, ".")
	if !found {
		return 0, 0, false
	}
	b := rest
	if i := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		b = rest[:i]
	}
	maj, err1 := strconv.Atoi(a)
	mi, err2 := strconv.Atoi(b)
	return maj, mi, err1 == nil && err2 == nil
}

// mountedFS is a kernel file system made on a device and mounted.
type mountedFS struct {
	kind    kernelFS
	device  string // /dev/nullb0
	devName string // nullb0: its name under /sys/block and /sys/fs/KIND
	dir     string // the mount point, a temporary folder
	// sysDir is the file system's folder under /sys/fs, for its own
	// counters ("" if it has none there).
	sysDir   string
	zoneSize int64
}

// f2fsSegment is f2fs's segment size; its sections (a zone each on a
// zoned device) are made of segments.
const f2fsSegment = 2 << 20

// makeKernelFS makes k on device (which bench peers has claimed and reset)
// and mounts it on a new temporary folder. mkfs's output is in the error
// when it refuses.
func makeKernelFS(ctx context.Context, k kernelFS, device string) (*mountedFS, error) {
	args := append(append([]string{}, k.mkfs[1:]...), device)
	cmd := exec.CommandContext(ctx, k.mkfs[0], args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", k.mkfs[0], strings.Join(args, " "), err, lastLines(out, 3))
	}
	dir, err := os.MkdirTemp("", "zonefold-peer-"+k.name+"-")
	if err != nil {
		return nil, fmt.Errorf("%s: mount point: %w", k.name, err)
	}
	if err := unix.Mount(device, dir, k.name, 0, ""); err != nil {
		os.Remove(dir)
		return nil, fmt.Errorf("mount -t %s %s: %w", k.name, device, err)
	}
	m := &mountedFS{kind: k, device: device, devName: blockName(device), dir: dir}
	m.sysDir = m.findSysDir()
	if sectors, err := readInt(filepath.Join("/sys/block", m.devName, "queue", "chunk_sectors")); err == nil {
		m.zoneSize = sectors * 512
	}
	return m, nil
}

// findSysDir is /sys/fs/f2fs/DEV, /sys/fs/xfs/DEV, or for btrfs the
// /sys/fs/btrfs/FSID whose devices/ holds DEV.
func (m *mountedFS) findSysDir() string {
	switch m.kind.name {
	case "btrfs":
		dirs, _ := filepath.Glob("/sys/fs/btrfs/*/devices/" + m.devName)
		if len(dirs) == 1 {
			return filepath.Dir(filepath.Dir(dirs[0]))
		}
		return ""
	default:
		d := filepath.Join("/sys/fs", m.kind.name, m.devName)
		if _, err := os.Stat(d); err != nil {
			return ""
		}
		return d
	}
}

// capacity is what the file system offers for file data when empty: the
// space statfs says an unprivileged writer may still use.
func (m *mountedFS) capacity() (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(m.dir, &st); err != nil {
		return 0, fmt.Errorf("%s: statfs: %w", m.kind.name, err)
	}
	return int64(st.Bavail) * st.Bsize, nil
}

// sync writes back everything and commits the file system (syncfs): after
// it, the device counter holds what the workload cost.
func (m *mountedFS) sync() error {
	f, err := os.Open(m.dir)
	if err != nil {
		return fmt.Errorf("%s: %w", m.kind.name, err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("%s: syncfs: %w", m.kind.name, err)
	}
	return nil
}

// unmount unmounts and removes the mount point. The workload's files must
// be closed.
func (m *mountedFS) unmount() error {
	if err := unix.Unmount(m.dir, 0); err != nil {
		return fmt.Errorf("umount %s: %w", m.dir, err)
	}
	return os.Remove(m.dir)
}

// fsFigures are what a file system says of its own GC, each -1 where it
// has no such counter.
type fsFigures struct {
	GCBytes int64 // data the file system's GC rewrote
	GCZones int64 // zones its GC freed
}

func noFigures() fsFigures { return fsFigures{GCBytes: -1, GCZones: -1} }

// figures reads the file system's GC counters (cumulative since mount).
//
//   - f2fs: moved_blocks_{foreground,background} (4 KiB blocks GC moved)
//     and gc_reclaimed_segments (2 MiB segments; a zone is a section of
//     zone size / 2 MiB of them) in /sys/fs/f2fs/DEV.
//   - btrfs: allocation/{data,metadata}/reclaim_{bytes,count} (block
//     groups relocated by the zoned reclaim; Linux >= 6.10 or so — older
//     kernels have no counter).
//   - xfs: "gc xpc" (bytes GC wrote) and the third "zoned" field (zones GC
//     reset) of /sys/fs/xfs/DEV/stats/stats.
func (m *mountedFS) figures() fsFigures {
	f := noFigures()
	if m.sysDir == "" {
		return f
	}
	switch m.kind.name {
	case "f2fs":
		fg, err1 := readInt(filepath.Join(m.sysDir, "moved_blocks_foreground"))
		bg, err2 := readInt(filepath.Join(m.sysDir, "moved_blocks_background"))
		if err1 == nil && err2 == nil {
			f.GCBytes = (fg + bg) * 4096
		}
		if n, err := readInt(filepath.Join(m.sysDir, "gc_reclaimed_segments")); err == nil && m.zoneSize > 0 {
			f.GCZones = n * f2fsSegment / m.zoneSize
		}
	case "btrfs":
		var bytes, count int64
		found := false
		for _, t := range []string{"data", "metadata", "system"} {
			b, err1 := readInt(filepath.Join(m.sysDir, "allocation", t, "reclaim_bytes"))
			c, err2 := readInt(filepath.Join(m.sysDir, "allocation", t, "reclaim_count"))
			if err1 == nil && err2 == nil {
				bytes, count, found = bytes+b, count+c, true
			}
		}
		if found {
			// A zoned btrfs block group is one zone.
			f.GCBytes, f.GCZones = bytes, count
		}
	case "xfs":
		data, err := os.ReadFile(filepath.Join(m.sysDir, "stats", "stats"))
		if err != nil {
			return f
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			switch {
			case len(fields) == 3 && fields[0] == "gc" && fields[1] == "xpc":
				if n, err := strconv.ParseInt(fields[2], 10, 64); err == nil {
					f.GCBytes = n
				}
			case len(fields) == 4 && fields[0] == "zoned":
				if n, err := strconv.ParseInt(fields[3], 10, 64); err == nil {
					f.GCZones = n
				}
			}
		}
	}
	return f
}

// sub is the figures accumulated since before; unknown stays unknown.
func (f fsFigures) sub(before fsFigures) fsFigures {
	d := f
	if f.GCBytes >= 0 && before.GCBytes >= 0 {
		d.GCBytes = f.GCBytes - before.GCBytes
	}
	if f.GCZones >= 0 && before.GCZones >= 0 {
		d.GCZones = f.GCZones - before.GCZones
	}
	return d
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// lastLines is the last n non-empty lines of a command's output, on one
// line, for an error message.
func lastLines(out []byte, n int) string {
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if len(lines) == 0 {
		return "(no output)"
	}
	return strings.Join(lines, " / ")
}

// blockName is the kernel's name of a block device node: /dev/nullb0 ->
// nullb0, following symlinks (/dev/disk/by-id/...).
func blockName(device string) string {
	if p, err := filepath.EvalSymlinks(device); err == nil {
		device = p
	}
	return filepath.Base(device)
}

// kernelFSBackend runs workloads on a mounted kernel file system: each
// file an ordinary file in the mount, written with buffered pwrite and
// fsync'd where the workload syncs. Its device counter is the block
// device's own, as for every row of bench peers.
type kernelFSBackend struct {
	m        *mountedFS
	dev      *peerDevice
	capacity int64
}

// newKernelFSBackend is m as a workload backend; its capacity is what
// statfs offers when empty.
func newKernelFSBackend(m *mountedFS, dev *peerDevice) (*kernelFSBackend, error) {
	c, err := m.capacity()
	if err != nil {
		return nil, err
	}
	return &kernelFSBackend{m: m, dev: dev, capacity: c}, nil
}

// Capacity implements Backend: the file system's free space when empty.
func (b *kernelFSBackend) Capacity() int64 { return b.capacity }

func (b *kernelFSBackend) path(name string) (string, error) {
	if name == "" || strings.ContainsRune(name, '/') || name == "." || name == ".." {
		return "", fmt.Errorf("bad file name %q", name)
	}
	return filepath.Join(b.m.dir, name), nil
}

// Create implements Backend.
func (b *kernelFSBackend) Create(name string) (BackendFile, error) {
	p, err := b.path(name)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	return kernelFSFile{f}, nil
}

// Remove implements Backend.
func (b *kernelFSBackend) Remove(name string) error {
	p, err := b.path(name)
	if err != nil {
		return err
	}
	return os.Remove(p)
}

// Sync implements Backend: syncfs, which writes back every dirty page and
// commits the file system.
func (b *kernelFSBackend) Sync(context.Context) error { return b.m.sync() }

// Counters implements Backend: the device's written bytes, and the file
// system's own GC figures where it has them. GCNanos is unknown: no file
// system here says how long its GC ran.
func (b *kernelFSBackend) Counters() Counters {
	f := b.m.figures()
	return Counters{DevWritten: b.dev.counter(), GCWritten: f.GCBytes, GCResets: f.GCZones, GCNanos: -1}
}

// kernelFSFile is an open file of a kernelFSBackend.
type kernelFSFile struct{ f *os.File }

func (f kernelFSFile) WriteAt(_ context.Context, p []byte, off int64) (int, error) {
	return f.f.WriteAt(p, off)
}

func (f kernelFSFile) Sync(context.Context) error { return f.f.Sync() }

func (f kernelFSFile) Close() error { return f.f.Close() }
