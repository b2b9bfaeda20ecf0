package engine

import (
	"bytes"
	"errors"
	"fmt"
	"syscall"
	"testing"
)

// TestTruncateOnAFullDevice: a shrinking truncate to a size inside a block
// must rewrite that block's tail as zeros, which takes a block and a
// record header before the old block becomes garbage. On a full device
// such truncates succeed while GC can make room, then fail with ENOSPC;
// each truncate must hold if it succeeded and leave the file as it was
// (size and bytes) if it failed, at once and after a power cut.
func TestTruncateOnAFullDevice(t *testing.T) {
	devName := memDevice(t, 12, "1M")
	cfg := Config{CacheBytes: 32 << 20, DirtyLimit: 16 << 20}
	e := formatOpen(t, devName, cfg)
	content := func(i int) []byte { return bytes.Repeat([]byte{byte(i), byte(i >> 8), 0x77}, 8000/3+1)[:8000] }
	name := func(i int) string { return fmt.Sprintf("t%04d", i) }
	handles := fillWith8000ByteFiles(t, e, content)
	want := map[string][]byte{}
	failed := 0
	for i, f := range handles {
		want[name(i)] = content(i)
		err := f.Truncate(5000)
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("truncate %s on a full device: %v, want nil or ENOSPC", name(i), err)
			}
			failed++
			if failed > 20 {
				break
			}
			continue
		}
		want[name(i)] = content(i)[:5000]
	}
	t.Logf("%d files; %d truncates failed", len(handles), failed)
	check := func(when string, e *Engine) {
		t.Helper()
		for n, w := range want {
			if got := readAll(t, e, n); !bytes.Equal(got, w) {
				t.Fatalf("%s: %s has %d bytes, want the %d its truncate's answer implies", when, n, len(got), len(w))
			}
		}
	}
	check("at once", e)
	e = powerCutReopen(t, e, devName, cfg)
	defer e.Close()
	check("after a power cut", e)
}

// fillWith8000ByteFiles fills a 12 x 1 MiB device with fsynced 8000-byte
// files of content(i) until one is refused with ENOSPC, and returns them.
func fillWith8000ByteFiles(t *testing.T, e *Engine, content func(i int) []byte) []*File {
	t.Helper()
	var hs []*File
	for i := 0; ; i++ {
		f, err := e.Create(fmt.Sprintf("t%04d", i))
		if err == nil {
			if _, err = f.WriteAt(content(i), 0); err == nil {
				err = f.Sync()
			}
		}
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return hs
		}
		hs = append(hs, f)
	}
}

// TestNoopResizeOnAFullDevice: a Grow to less than the size, and a
// Truncate to the size, change no byte on the device, so a full device
// must not refuse them. (Both failed with ENOSPC: the tail block's
// rewrite was admitted before the truncate looked at the size; the server
// sends its grow flag down this path.)
func TestNoopResizeOnAFullDevice(t *testing.T) {
	e := formatOpen(t, memDevice(t, 12, "1M"), Config{CacheBytes: 32 << 20, DirtyLimit: 16 << 20})
	defer e.Close()
	hs := fillWith8000ByteFiles(t, e, func(i int) []byte { return bytes.Repeat([]byte{byte(i) | 1}, 8000) })
	if err := hs[0].Grow(5000); err != nil || hs[0].Size() != 8000 {
		t.Fatalf("Grow(5000) of an 8000-byte file on a full device: %v, size %d, want nil, 8000", err, hs[0].Size())
	}
	if err := hs[1].Truncate(8000); err != nil || hs[1].Size() != 8000 {
		t.Fatalf("Truncate(8000) of an 8000-byte file on a full device: %v, size %d, want nil, 8000", err, hs[1].Size())
	}
}

// TestTruncateZeroTailOnAFullDevice: a shrinking truncate into a block
// whose bytes past the new size are zeros already on the device has
// nothing to rewrite, so a full device must not refuse it (a user frees
// space with truncate -s). The cut holds at once, after a power cut, and
// the bytes past it read as zeros when the file grows again. (Before, the
// tail's rewrite was always admitted first, and the truncates failed with
// ENOSPC.)
func TestTruncateZeroTailOnAFullDevice(t *testing.T) {
	devName := memDevice(t, 12, "1M")
	cfg := Config{CacheBytes: 32 << 20, DirtyLimit: 16 << 20}
	e := formatOpen(t, devName, cfg)
	content := func(i int) []byte {
		b := make([]byte, 8000)
		for j := range 5000 {
			b[j] = byte(i+j) | 1
		}
		return b
	}
	hs := fillWith8000ByteFiles(t, e, content)
	for i, f := range hs {
		if err := f.Truncate(5000); err != nil {
			t.Fatalf("truncate t%04d to 5000 (zeros past it) on a full device: %v", i, err)
		}
	}
	e = powerCutReopen(t, e, devName, cfg)
	defer e.Close()
	for i := range hs {
		name := fmt.Sprintf("t%04d", i)
		if got := readAll(t, e, name); !bytes.Equal(got, content(i)[:5000]) {
			t.Fatalf("after a power cut: %s has %d bytes, want the first 5000 written", name, len(got))
		}
	}
	f, err := e.Open("t0000")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Grow(8192); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, e, "t0000"); !bytes.Equal(got[5000:], make([]byte, 8192-5000)) {
		t.Fatal("bytes past a truncated end do not read as zeros after the file grows")
	}
}
