package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseRelease(t *testing.T) {
	for _, c := range []struct {
		rel          string
		major, minor int
		ok           bool
	}{
		{"6.1.0-57-amd64", 6, 1, true},
		{"7.2.13+deb14-amd64", 7, 2, true},
		{"6.15", 6, 15, true},
		{"5.10.0", 5, 10, true},
		{"garbage", 0, 0, false},
		{"x.1", 0, 0, false},
	} {
		maj, min, ok := parseRelease(c.rel)
		if ok != c.ok || ok && (maj != c.major || min != c.minor) {
			t.Errorf("parseRelease(%q) = %d, %d, %v; want %d, %d, %v", c.rel, maj, min, ok, c.major, c.minor, c.ok)
		}
	}
}

func TestLastLines(t *testing.T) {
	out := []byte("a\n\n  b  \nc\nd\n")
	if got := lastLines(out, 2); got != "c / d" {
		t.Errorf("lastLines = %q", got)
	}
	if got := lastLines(nil, 2); got != "(no output)" {
		t.Errorf("lastLines(nil) = %q", got)
	}
}

// writeFiles lays out files under dir: name -> content.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// The figures come from each file system's own sysfs files, in the
// layouts Linux 6.1 and 7.2 have (seen in the VM harness).
func TestKernelFSFigures(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"f2fs/moved_blocks_foreground":            "10\n",
		"f2fs/moved_blocks_background":            "5\n",
		"f2fs/gc_reclaimed_segments":              "3\n",
		"btrfs/allocation/data/reclaim_bytes":     "4194304\n",
		"btrfs/allocation/data/reclaim_count":     "1\n",
		"btrfs/allocation/metadata/reclaim_bytes": "1048576\n",
		"btrfs/allocation/metadata/reclaim_count": "2\n",
		"xfs/stats/stats":                         "extent_alloc 0 0 0 0\nzoned 7 8 9\nxpc 0 10485760 0\ngc xpc 123456\n",
		"btrfs-6.1/allocation/data/bytes_used":    "0\n",
	})
	for _, c := range []struct {
		kind, sys string
		want      fsFigures
	}{
		// 4 MiB zones: a zone is two 2 MiB f2fs segments.
		{"f2fs", "f2fs", fsFigures{GCBytes: 15 * 4096, GCZones: 1}},
		{"btrfs", "btrfs", fsFigures{GCBytes: 5 << 20, GCZones: 3}},
		{"xfs", "xfs", fsFigures{GCBytes: 123456, GCZones: 9}},
		// 6.1's btrfs has no reclaim counters: unknown, not zero.
		{"btrfs", "btrfs-6.1", noFigures()},
		{"xfs", "", noFigures()},
	} {
		k, _ := kernelFSByName(c.kind)
		m := &mountedFS{kind: k, zoneSize: 4 << 20}
		if c.sys != "" {
			m.sysDir = filepath.Join(dir, c.sys)
		}
		if got := m.figures(); got != c.want {
			t.Errorf("%s in %s: figures %+v, want %+v", c.kind, c.sys, got, c.want)
		}
	}
	a := fsFigures{GCBytes: 100, GCZones: 5}
	b := fsFigures{GCBytes: 40, GCZones: 2}
	if got := a.sub(b); got.GCBytes != 60 || got.GCZones != 3 {
		t.Errorf("sub = %+v", got)
	}
	if got := a.sub(noFigures()); got.GCBytes != 100 {
		t.Errorf("sub of unknown = %+v, want the total", got)
	}
}

func TestKernelFSUnsupported(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no mkfs anywhere
	for _, k := range kernelFSes {
		why := k.unsupported()
		if why == "" {
			t.Errorf("%s: supported without %s", k.name, k.mkfs[0])
		}
		if !strings.Contains(why, k.mkfs[0]) && !strings.Contains(why, "needs Linux") {
			t.Errorf("%s: reason %q names neither the tool nor the kernel", k.name, why)
		}
	}
}

// The backend writes ordinary files, refuses names that leave its
// folder, and removes what it is told to.
func TestKernelFSBackendFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b := &kernelFSBackend{m: &mountedFS{kind: kernelFSes[0], dir: dir}}
	for _, bad := range []string{"", ".", "..", "a/b", "../x"} {
		if _, err := b.Create(bad); err == nil {
			t.Errorf("Create(%q) succeeded", bad)
		}
		if err := b.Remove(bad); err == nil {
			t.Errorf("Remove(%q) succeeded", bad)
		}
	}
	f, err := b.Create("f")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(ctx, []byte("hello"), 4096); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, "f"))
	if err != nil || st.Size() != 4096+5 {
		t.Fatalf("file after WriteAt: %v, %v", st, err)
	}
	// Create truncates a file of the same name.
	if f, err = b.Create("f"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if st, _ = os.Stat(filepath.Join(dir, "f")); st.Size() != 0 {
		t.Errorf("Create over an existing file: size %d", st.Size())
	}
	if err := b.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Remove("f"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "f")); !os.IsNotExist(err) {
		t.Errorf("after Remove: %v", err)
	}
}

// A device that holds a known file system is named in the refusal, from
// its signature.
func TestPeerDeviceSignatures(t *testing.T) {
	for _, s := range signatures {
		p := filepath.Join(t.TempDir(), "dev")
		img := make([]byte, 256<<10)
		copy(img[s.off:], s.magic)
		if err := os.WriteFile(p, img, 0o644); err != nil {
			t.Fatal(err)
		}
		d := &peerDevice{path: p}
		if got := d.contents(); got != s.name {
			t.Errorf("%s: contents %q", s.name, got)
		}
	}
	p := filepath.Join(t.TempDir(), "dev")
	if err := os.WriteFile(p, make([]byte, 256<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := (&peerDevice{path: p}).contents(); got != "" {
		t.Errorf("zeros: contents %q", got)
	}
}

// Without --force a device holding a file system is refused, naming it
// and the flag; with --force, or when it holds nothing, it is accepted.
func TestPeerDeviceRefusal(t *testing.T) {
	dir := t.TempDir()
	img := func(name string, off int64, magic []byte) *peerDevice {
		p := filepath.Join(dir, name)
		b := make([]byte, 256<<10)
		copy(b[off:], magic)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return &peerDevice{path: p}
	}
	for _, s := range signatures {
		d := img("fs", s.off, s.magic)
		err := d.erasable(false)
		if err == nil || !strings.Contains(err.Error(), s.name) || !strings.Contains(err.Error(), "--force") {
			t.Errorf("%s without --force: %v; want a refusal naming it and --force", s.name, err)
		}
		if err := d.erasable(true); err != nil {
			t.Errorf("%s with --force: %v", s.name, err)
		}
	}
	// zonefold's superblock sits in a sequential zone: a plain file has
	// none, so its magic at offset 0 is not taken for one.
	if err := img("zeros", 0, nil).erasable(false); err != nil {
		t.Errorf("empty device refused: %v", err)
	}
	// Not a block device: refused whatever --force says.
	for _, p := range []string{filepath.Join(dir, "zeros"), "/dev/null", dir} {
		for _, force := range []bool{false, true} {
			if _, err := openPeerDevice(p, force); err == nil {
				t.Errorf("openPeerDevice(%s, force=%v) accepted it", p, force)
			}
		}
	}
}
