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
	var handles []*File
	for i := 0; ; i++ {
		f, err := e.Create(name(i))
		if err == nil {
			if _, err = f.WriteAt(content(i), 0); err == nil {
				err = f.Sync()
			}
		}
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
		handles = append(handles, f)
	}
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
