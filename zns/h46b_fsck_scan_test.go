package zns

import (
	"errors"
	"strings"
	"testing"
)

// What telling a blank file from a lost table costs (checkLostTable):
// a sparse file is read only where it holds data extents (SEEK_DATA);
// a blank file of written zeros is read whole, once, as it becomes a
// device. An Open with Existing (fsck) read it whole too, every time,
// though it refuses the file whatever the check finds (fsck never
// writes; a command that would write runs the whole check): a 16 GiB
// file took 29 s to be told "no zone table". It now reads no more than
// fsckScanBudget of the file's data for the first byte that is not
// zero, and says when it stopped there.

// Of a sparse file, only the data extents are read: here 4 MiB of
// written zeros in a 1 GiB file (a file copied with holes, a VM image
// that wrote zeros here and there), on each kind of Open.
func TestEmuBlankCheckReadsOnlyDataExtents(t *testing.T) {
	const need = 1<<20 + 64*16<<20
	for _, opts := range []Options{{}, {Existing: true}, {Existing: true, InferLostTable: true}} {
		path := sparseFile(t, need)
		for _, off := range []int64{3 << 20, 200 << 20, 700 << 20, need - 1<<20} {
			patchFile(t, path, off, make([]byte, 1<<20))
		}
		read0, counted := readBytes(t)
		if !counted {
			t.Skip("/proc/self/io does not say what this process reads")
		}
		d, err := Open("emu:"+path+fallocGeo, opts)
		read1, _ := readBytes(t)
		if opts.Existing != (err != nil) {
			t.Fatalf("Open(%+v) of a blank sparse file: %v", opts, err)
		}
		if d != nil {
			d.Close()
		}
		t.Logf("Open(%+v) read %d bytes of a 1 GiB file holding 4 MiB of data extents", opts, read1-read0)
		// 4 MiB of extents, the header area, slot 1's search.
		if read1-read0 > 4<<20+2<<20 {
			t.Errorf("Open(%+v) read %d bytes of a sparse file holding 4 MiB of data, want about that", opts, read1-read0)
		}
	}
}

// A blank file of written zeros: fsck reads at most fsckScanBudget of
// it, and says it stopped; fsck --copy-to, which salvages a lost table
// it finds, still reads it through.
func TestEmuFsckOfAWrittenBlankFileReadsLittle(t *testing.T) {
	old := fsckScanBudget
	fsckScanBudget = 1 << 20
	t.Cleanup(func() { fsckScanBudget = old })
	const size = 33 << 20 // lostGeo needs 9 MiB: data past the zones is looked for too
	for _, tc := range []struct {
		name    string
		opts    Options
		maxRead int64
	}{
		{"fsck", Options{Existing: true}, 3 << 20},
		{"fsck-copy-to", Options{Existing: true, InferLostTable: true}, size + 1<<20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := zerosFile(t, size)
			err := refusedOpenOf(t, p, p, lostGeo, tc.opts, tc.maxRead)
			if errors.Is(err, ErrLostZoneTable) || !strings.Contains(err.Error(), "no zone table") {
				t.Fatalf("Open = %v, want the refusal of a file with no zone table", err)
			}
			if tc.opts.InferLostTable == strings.Contains(err.Error(), "read no further") {
				t.Errorf("Open = %v: want it to say it read no further: %v", err, !tc.opts.InferLostTable)
			}
		})
	}
	// Data within the budget is still found, and told apart.
	p := foreignFile(t, size, map[int64][]byte{1<<20 + 512<<10: randomBytes(8, 4096)})
	patchFile(t, p, 0, make([]byte, 1<<20+512<<10)) // written zeros before it
	err := refusedOpenOf(t, p, p, lostGeo, Options{Existing: true}, 3<<20)
	if !strings.Contains(err.Error(), "not an emu device") {
		t.Errorf("fsck of a file with data 512 KiB into its zones: %v, want it refused as no emu device", err)
	}
}
