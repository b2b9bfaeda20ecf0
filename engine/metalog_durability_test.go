package engine

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

// TestFailedRemoveDoesNotDestroyLaterFsyncedData: a remove whose
// record lands but reports EIO, and whose switch to the other half fails
// too, returns ErrMetaLog and leaves x in the namespace. Data written to
// x and fsynced after that is acknowledged; a power cut must not lose it.
//
// Failed before the fix in both cases: the fsync's flush (or the
// checkpoint's, before its write failed) made the stray remove record
// durable, and recovery replayed it.
func TestFailedRemoveDoesNotDestroyLaterFsyncedData(t *testing.T) {
	for _, tc := range []struct {
		name   string
		faults []metaFault
	}{
		{"lands, checkpoint fails", []metaFault{metaWriteLand, metaWriteFail}},
		{"lands, retry lands", []metaFault{metaWriteLand, metaWriteOK, metaWriteLand}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			devName := emuDevice(t, 16, "1M", "")
			cfg := smallConfig()
			e := formatOpen(t, devName, cfg)
			h := mustCreate(t, e, "x")
			armMetaFaults(t, tc.faults...)
			err := e.Remove("x")
			testHookMetaWrite = nil
			if !errors.Is(err, ErrMetaLog) {
				t.Fatalf("remove: %v; want ErrMetaLog", err)
			}
			if !exists(t, e, "x") {
				t.Fatal("x gone after a failed remove")
			}
			data := bytes.Repeat([]byte{0xab}, 4*BlockSize)
			if _, err := h.WriteAt(data, 0); err != nil {
				t.Fatal(err)
			}
			if err := h.Sync(); err != nil {
				t.Fatalf("fsync: %v", err)
			}
			h.Close()
			e = powerCutReopen(t, e, devName, cfg)
			defer e.Close()
			if !exists(t, e, "x") {
				t.Fatal("x, fsynced after its remove failed with ErrMetaLog, lost to a power cut")
			}
		})
	}
}

// TestFailedOpRecordNeverUndoesLaterAcks: whichever namespace operation
// fails with ErrMetaLog after its record landed (in the half it was
// meant for, or again after the switch), whatever is acknowledged after
// it (a file's fsync, Engine.Sync, SyncNamespace) survives a power cut
// as the engine showed it: the names x, y and z exist as they did and x
// holds what was fsynced to it. A failed create does not bring z back,
// a failed rename of y over x does not replace x, a failed remove does
// not take x, and a failed truncate keeps the size the engine showed.
//
// Failed before the fix for the remove, the rename and the create
// (the ack's flush made the stray record durable, and recovery replayed
// it); the truncate passed (its cut stays in memory, as the record says).
func TestFailedOpRecordNeverUndoesLaterAcks(t *testing.T) {
	ops := []struct {
		name string
		do   func(e *Engine, x *File) error
	}{
		{"remove", func(e *Engine, x *File) error { return e.Remove("x") }},
		{"rename over", func(e *Engine, x *File) error { return e.Rename("y", "x") }},
		{"create", func(e *Engine, x *File) error { _, err := e.Create("z"); return err }},
		{"truncate", func(e *Engine, x *File) error { return x.Truncate(2 * BlockSize) }},
	}
	acks := []struct {
		name string
		do   func(e *Engine, x *File) error
		data bool // the ack covers x's data, not only the names
	}{
		{"fsync", func(e *Engine, x *File) error { return x.Sync() }, true},
		{"engine sync", func(e *Engine, x *File) error { return e.Sync(context.Background()) }, true},
		{"sync namespace", func(e *Engine, x *File) error { return e.SyncNamespace() }, false},
	}
	faults := []struct {
		name   string
		faults []metaFault
	}{
		{"lands, checkpoint fails", []metaFault{metaWriteLand, metaWriteFail}},
		{"lands, retry lands", []metaFault{metaWriteLand, metaWriteOK, metaWriteLand}},
	}
	for _, op := range ops {
		for _, ack := range acks {
			for _, fc := range faults {
				t.Run(op.name+"/"+ack.name+"/"+fc.name, func(t *testing.T) {
					devName := emuDevice(t, 16, "1M", "")
					cfg := smallConfig()
					e := formatOpen(t, devName, cfg)
					x := mustCreate(t, e, "x")
					y := mustCreate(t, e, "y")
					for i, f := range []*File{x, y} {
						if _, err := f.WriteAt(bytes.Repeat([]byte{byte('A' + i)}, 8*BlockSize), 0); err != nil {
							t.Fatal(err)
						}
						if err := f.Sync(); err != nil {
							t.Fatal(err)
						}
					}
					y.Close()
					armMetaFaults(t, fc.faults...)
					err := op.do(e, x)
					testHookMetaWrite = nil
					if !errors.Is(err, ErrMetaLog) {
						t.Fatalf("%s: %v; want ErrMetaLog", op.name, err)
					}
					if _, err := x.WriteAt(bytes.Repeat([]byte{'C'}, BlockSize), 0); err != nil {
						t.Fatal(err)
					}
					if err := ack.do(e, x); err != nil {
						t.Fatalf("%s after the failed %s: %v", ack.name, op.name, err)
					}
					x.Close()
					names := map[string]bool{}
					var want []byte
					for _, n := range []string{"x", "y", "z"} {
						names[n] = exists(t, e, n)
					}
					if names["x"] {
						want = readAll(t, e, "x")
					}
					e = powerCutReopen(t, e, devName, cfg)
					for n, was := range names {
						if got := exists(t, e, n); got != was {
							t.Fatalf("after the power cut %s exists %v; the engine showed %v before it", n, got, was)
						}
					}
					if ack.data && names["x"] {
						sameBytes(t, "x after the power cut", readAll(t, e, "x"), want)
					}
					mustCreate(t, e, "w").Close()
					if err := e.Close(); err != nil {
						t.Fatal(err)
					}
					checkFsck(t, devName)
				})
			}
		}
	}
}
