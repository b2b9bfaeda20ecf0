package engine

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"
)

// h19hDev is a device with a damaged file "a" and an intact file "b"
// whose first zone holds garbage (half of it overwritten), for GC to
// collect.
type h19hDev struct {
	devName string
	e       *Engine
	b       []byte
}

func h19hPattern(tag string, n int) []byte {
	p := make([]byte, n)
	for i := 0; i < n; i += 8 {
		copy(p[i:], fmt.Sprintf("%s%05x", tag, i/8%0xfffff))
	}
	return p
}

// h19hSetup: h19gBase ("a", 64 KiB) and "b", 1.5 MiB, its first 512 KiB
// written again, everything fsynced.
func h19hSetup(t *testing.T) *h19hDev {
	t.Helper()
	devName, e, _ := h19gBase(t)
	b := h19hPattern("b1", 3<<19)
	h := createSynced(t, e, "b", b)
	nb := h19hPattern("b2", 512<<10)
	if _, err := h.WriteAt(nb, 0); err != nil {
		t.Fatal(err)
	}
	if err := h.Sync(); err != nil {
		t.Fatal(err)
	}
	h.Close()
	copy(b, nb)
	return &h19hDev{devName: devName, e: e, b: b}
}

// ckptFileOf is the snapshot's entry for name.
func ckptFileOf(t *testing.T, c *checkpointState, name string) *ckptFile {
	t.Helper()
	for i := range c.files {
		if c.files[i].name == name {
			return &c.files[i]
		}
	}
	t.Fatalf("no %q in the snapshot", name)
	return nil
}

// h19hCheckB fails the test if b does not read back whole.
func h19hCheckB(t *testing.T, e *Engine, want []byte, when string) {
	t.Helper()
	var got []byte
	var err error
	h19gBounded(t, "read b "+when, time.Minute, func() {
		f, oerr := e.Open("b")
		if oerr != nil {
			err = oerr
			return
		}
		defer f.Close()
		got = make([]byte, f.Size())
		var n int
		n, rerr := f.ReadAt(got, 0)
		if n == len(got) {
			rerr = nil
		}
		got, err = got[:n], rerr
	})
	if err != nil {
		t.Fatalf("%s: b, untouched by the damage, does not read: %v", when, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: b, untouched by the damage, reads %d bytes that differ from its %d (first diff at %d)", when, len(got), len(want), firstDiff(got, want))
	}
}

// h19hExercise opens the crafted device and works it: reads, GC passes,
// overwrite, truncate, rename and remove of every file but b, Close,
// reopen, fsck. b must read back whole throughout; nothing may panic or
// hang; a device Open accepted and Close closed must open again.
func h19hExercise(t *testing.T, d *h19hDev) {
	t.Helper()
	if rep, err := h19gFsck(t, d.devName); err == nil {
		t.Logf("fsck before Open: problems %q", rep.Problems)
	} else {
		t.Logf("fsck before Open: %v", err)
	}
	e, err := h19gOpen(t, d.devName)
	if err != nil {
		t.Logf("Open refused: %v", err)
		return
	}
	closed := false
	defer func() {
		if !closed {
			e.Close()
		}
	}()
	h19hCheckB(t, e, d.b, "after Open")
	var names []string
	for _, fi := range e.List() {
		if fi.Name != "b" {
			names = append(names, fi.Name)
		}
	}
	slices.Sort(names)
	for _, n := range names {
		h19gBounded(t, "read "+n, time.Minute, func() {
			if f, err := e.Open(n); err == nil {
				buf := make([]byte, max(f.Size(), 1))
				_, rerr := f.ReadAt(buf, 0)
				t.Logf("read %s (%d bytes): %v", n, f.Size(), rerr)
				f.Close()
			}
		})
	}
	gc := func(when string) {
		h19gBounded(t, "GC "+when, time.Minute, func() {
			for i := 0; i < 16; i++ {
				moved, err := e.gc.pass(gcUrgent)
				if err != nil {
					t.Logf("GC pass %s: %v", when, err)
				}
				if !moved {
					break
				}
			}
		})
		h19hCheckB(t, e, d.b, "after GC "+when)
	}
	gc("after Open")
	for _, n := range names {
		h19gBounded(t, "overwrite/truncate/rename/remove "+n, time.Minute, func() {
			if f, err := e.Open(n); err == nil {
				_, werr := f.WriteAt(bytes.Repeat([]byte{0x5a}, 8192), 0)
				serr := f.Sync()
				terr := f.Truncate(4096 + 100)
				t.Logf("%s: write %v, sync %v, truncate %v", n, werr, serr, terr)
				f.Close()
			}
		})
		h19hCheckB(t, e, d.b, "after overwrite and truncate of "+n)
		gc("after overwrite of " + n)
		h19gBounded(t, "rename/remove "+n, time.Minute, func() {
			t.Logf("%s: rename %v, remove %v", n, e.Rename(n, n+".x"), e.Remove(n+".x"))
		})
		h19hCheckB(t, e, d.b, "after remove of "+n)
	}
	// Churn: fill and free zones, so GC has victims.
	h19gBounded(t, "churn", time.Minute, func() {
		h, err := e.Create("f")
		if err != nil {
			t.Logf("create f: %v", err)
			return
		}
		if _, err := h.WriteAt(h19hPattern("ff", 3<<20), 0); err == nil {
			h.Sync()
		}
		h.Close()
		e.Remove("f")
	})
	gc("after churn")
	var cerr error
	h19gBounded(t, "Close", time.Minute, func() { cerr = e.Close() })
	closed = true
	if cerr != nil {
		t.Logf("Close: %v", cerr)
	}
	e2, err := h19gOpen(t, d.devName)
	if err != nil {
		t.Fatalf("the device Open accepted no longer opens after Close: %v", err)
	}
	h19hCheckB(t, e2, d.b, "after Close and reopen")
	h19gBounded(t, "Close 2", time.Minute, func() { e2.Close() })
	rep, err := h19gFsck(t, d.devName)
	if err != nil {
		t.Errorf("fsck after the damaged file was removed and the device reopened: %v", err)
	} else if len(rep.Problems) > 0 {
		t.Logf("fsck at the end: problems %q", rep.Problems)
	}
}
