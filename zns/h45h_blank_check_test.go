package zns

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Review of the blank-or-lost check reading every byte of data
// (checkLostTable, firstNonZero): what it costs on files that hold no
// data.

// fallocGeo is a 1 GiB device: 64 zones of 16 MiB.
const fallocGeo = "?zone_size=16M&zones=64"

// fallocBlank makes a file of size bytes whose blocks are all
// fallocate'd (unwritten extents: they read as zeros, and SEEK_DATA
// counts them as holes). The test is skipped where the file system
// cannot fallocate: there is no such file to open there.
func fallocBlank(t *testing.T, size int64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dev")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			t.Skipf("the file system of %s does not fallocate: %v", path, err)
		}
		t.Fatal(err)
	}
	return path
}

// maxFallocRead bounds what Open may read of a fallocate'd 1 GiB file:
// the header area (the search for slot 1 reads a block every 4 KiB of
// the first 32 MiB, which caches them) and no more.
const maxFallocRead = 64 << 20

// A fallocate'd file (fallocate -l, what a tool that pre-sizes a file
// makes) holds no data: SEEK_DATA skips it. The check read it whole all
// the same: each buffered read's readahead put the next pages of zeros
// in the page cache, where SEEK_DATA counts them as data (ext4 does, for
// an unwritten extent), so every stretch it read made the next one data
// too: 1 GiB read here, 16 GiB for a 16 GiB file, and as many pages of
// zeros left in the page cache.
func TestEmuBlankCheckDoesNotReadFallocatedSpace(t *testing.T) {
	const need = 1<<20 + 64*16<<20
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"first-open", Options{}},
		{"existing-only-fsck", Options{Existing: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := fallocBlank(t, need)
			read0, counted := readBytes(t)
			if !counted {
				t.Skip("/proc/self/io does not say what this process reads")
			}
			d, err := Open("emu:"+path+fallocGeo, tc.opts)
			read1, _ := readBytes(t)
			if tc.opts.Existing {
				if err == nil || !strings.Contains(err.Error(), "no zone table") {
					t.Errorf("Open(%+v) of a blank file = %v, want a refusal saying it has no zone table", tc.opts, err)
				}
			} else if err != nil {
				t.Fatalf("Open of a blank fallocate'd file: %v", err)
			}
			if d != nil {
				d.Close()
			}
			if read1-read0 > maxFallocRead {
				t.Errorf("Open read %d MiB of a fallocate'd file that holds no data, want at most %d MiB", (read1-read0)>>20, maxFallocRead>>20)
			}
		})
	}
}

// A blank file every block of which is allocated (written zeros, a
// block device that reads zeros) is read whole before it becomes a
// device: no fewer bytes tell it holds no data. That can take minutes
// (a 16 GiB file took 29 s here, a large block device far longer), and
// Open said nothing while it read: a command that seems hung. Once the
// check has read scanLogAfter bytes, it says what it is doing and how
// to skip it; a sparse file, read not at all, says nothing.
func TestEmuBlankCheckSaysWhenItReadsMuch(t *testing.T) {
	old := scanLogAfter
	scanLogAfter = 4 << 20
	t.Cleanup(func() { scanLogAfter = old })
	for _, tc := range []struct {
		name string
		file func(t *testing.T) string
		says bool
	}{
		{"written-zeros", func(t *testing.T) string {
			p := sparseFile(t, 0)
			patchFile(t, p, 0, make([]byte, 9<<20))
			return p
		}, true},
		{"sparse", func(t *testing.T) string { return sparseFile(t, 9<<20) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.file(t)
			log := captureLog(t)
			e, _ := openEmuT(t, path, lostGeo)
			e.Close()
			said := strings.Contains(log.String(), "reading")
			if said != tc.says {
				t.Fatalf("log %q: said it reads the file: %v, want %v", log, said, tc.says)
			}
			for _, want := range []string{path, "format=1", "blank"} {
				if said && !strings.Contains(log.String(), want) {
					t.Errorf("log %q does not say %q", log, want)
				}
			}
		})
	}
}
