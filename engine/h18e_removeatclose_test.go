package engine

import (
	"errors"
	"io/fs"
	"testing"
)

// TestH18eRemoveUnusedDuringFailedCreateStaysForever: 5622f90 promises
// that RemoveUnused of an open file (ErrInUse) removes it when its last
// handle goes. A create counts its handle (files.go OpenFile: handles.Add
// under nsMu) before it waits for its flush without nsMu; RemoveUnused
// then finds the file open and marks it. When that flush fails, the
// create drops its handle with handles.Add(-1) and returns the error: no
// handle was returned, none is left, and nothing looks at the mark (only
// File.Close calls removeAtClose). The file stays for good, as h18b's
// unlink=1 leak did. openHandle's failed truncate drops its handle the
// same way.
func TestH18eRemoveUnusedDuringFailedCreateStaysForever(t *testing.T) {
	_, emu, held, e := openHeldFlush(t, true) // held before it flushes
	defer e.Close()
	held.armed.Store(true)
	errs := make(chan error, 1)
	go func() {
		f, err := e.Create("x")
		if err == nil {
			err = f.Close()
			if err == nil {
				err = errors.New("the create succeeded")
			}
		}
		errs <- err
	}()
	within(t, held.flushed, "the create's flush")
	if err := e.RemoveUnused("x"); !errors.Is(err, ErrInUse) {
		t.Fatalf("set-up: RemoveUnused while the create waits for its flush: %v, want ErrInUse", err)
	}
	emu.FailFlush(1)
	close(held.release)
	if err := within(t, errs, "the create"); err == nil || err.Error() == "the create succeeded" {
		t.Fatalf("set-up: the create over a failed flush: %v", err)
	} else {
		t.Logf("create: %v", err)
	}
	e.nsMu.RLock()
	f := e.byName["x"]
	e.nsMu.RUnlock()
	if f != nil {
		t.Logf("x: %d handles, marked %v", f.handles.Load(), f.unlinkAtClose.Load())
	}
	if _, err := e.Stat("x"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("RemoveUnused answered ErrInUse (removed at the last close), and no handle is left: stat %v, want gone", err)
	}
}
