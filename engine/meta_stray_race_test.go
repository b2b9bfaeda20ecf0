package engine

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

// TestFailedOpBetweenSettleAndFlushNeverUndoesTheAck: an acknowledging
// flush (a file's fsync, Engine.Sync, SyncNamespace) settles any failed
// operation's record (stray) first, then flushes. A remove of x whose
// record lands but reports EIO, and whose switch fails too, can come
// between the two (another client's request): it returns ErrMetaLog,
// leaving x, and the flush that follows makes its record durable. The
// ack comes after the remove failed, so a power cut must keep x and what
// was synced to it.
//
// Failed before the fix (x gone after the cut for every ack): nothing
// looked for a stray record after the flush. flushAcked settles again
// after it.
func TestFailedOpBetweenSettleAndFlushNeverUndoesTheAck(t *testing.T) {
	acks := []struct {
		name string
		do   func(e *Engine, x *File) error
	}{
		{"fsync", func(e *Engine, x *File) error { return x.Sync() }},
		{"engine sync", func(e *Engine, x *File) error { return e.Sync(context.Background()) }},
		{"sync namespace", func(e *Engine, x *File) error { return e.SyncNamespace() }},
	}
	for _, ack := range acks {
		t.Run(ack.name, func(t *testing.T) {
			devName := emuDevice(t, 16, "1M", "")
			cfg := smallConfig()
			e := formatOpen(t, devName, cfg)
			x := mustCreate(t, e, "x")
			if _, err := x.WriteAt(bytes.Repeat([]byte{'A'}, 8*BlockSize), 0); err != nil {
				t.Fatal(err)
			}
			if err := x.Sync(); err != nil {
				t.Fatal(err)
			}
			// A deferred remove of another file leaves the
			// namespace a flush to wait for (SyncNamespace).
			mustCreate(t, e, "y").Close()
			if err := e.RemoveDeferred("y"); err != nil {
				t.Fatal(err)
			}
			if _, err := x.WriteAt(bytes.Repeat([]byte{'C'}, BlockSize), 0); err != nil {
				t.Fatal(err)
			}
			var removeErr error
			ran := false
			testHookAckFlush = func(e *Engine) {
				if ran {
					return
				}
				ran = true
				armMetaFaults(t, metaWriteLand, metaWriteFail)
				removeErr = e.Remove("x")
				testHookMetaWrite = nil
			}
			t.Cleanup(func() { testHookAckFlush, testHookMetaWrite = nil, nil })
			err := ack.do(e, x)
			testHookAckFlush = nil
			if !ran {
				t.Fatal("the ack ran no flush")
			}
			if !errors.Is(removeErr, ErrMetaLog) {
				t.Fatalf("remove: %v; want ErrMetaLog", removeErr)
			}
			if !exists(t, e, "x") {
				t.Fatal("x gone after a failed remove")
			}
			if err != nil {
				// Refusing the ack is correct too; this test
				// wants it given, the settle succeeding.
				t.Fatalf("%s: %v", ack.name, err)
			}
			x.Close()
			want := readAll(t, e, "x")
			e = powerCutReopen(t, e, devName, cfg)
			if !exists(t, e, "x") {
				t.Fatalf("x, whose remove failed before the %s was acknowledged, lost to a power cut", ack.name)
			}
			if ack.name != "sync namespace" {
				sameBytes(t, "x after the power cut", readAll(t, e, "x"), want)
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			checkFsck(t, devName)
		})
	}
}
