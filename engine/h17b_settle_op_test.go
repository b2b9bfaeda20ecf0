package engine

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"testing"
)

// TestH17bDurableOpAfterFailedAppendSurvivesPowerCut: an append fails
// (failedAppend set), then a durable remove (and a rename, a truncate) is
// acknowledged. appendOp writes the operation's record in the active
// metadata half, then settles the failed append with a checkpoint in the
// other half (settleStrayLocked) before it flushes: that checkpoint is
// numbered above the operation, but its snapshot is taken before the
// caller applies the operation to memory (remove drops the file only
// after appendOp returns). Recovery takes the checkpoint, which still
// has the file, and ignores the operation's record, which is in the
// other half and numbered below it: the acknowledged remove is undone
// (a rename likewise; a truncate, checked too, survives).
func TestH17bDurableOpAfterFailedAppendSurvivesPowerCut(t *testing.T) {
	for _, op := range []string{"remove", "rename", "truncate"} {
		t.Run(op, func(t *testing.T) {
			devName := emuDevice(t, 16, "1M", "")
			cfg := smallConfig()
			e := formatOpen(t, devName, cfg)
			a := createSynced(t, e, "a", bytes.Repeat([]byte{1}, 64<<10))
			v := createSynced(t, e, "victim", bytes.Repeat([]byte{2}, 64<<10))
			_ = v
			// An append fails: the engine owes the checkpoint that
			// supersedes its record (failedAppend).
			if _, err := a.WriteAt(bytes.Repeat([]byte{3}, 16<<10), 0); err != nil {
				t.Fatal(err)
			}
			emuOf(t, e).FailWrite(1)
			if err := e.wb.FlushFile(context.Background(), a.f.id); err == nil {
				t.Fatal("writeback with a failing append succeeded")
			}
			if !e.failedAppend.Load() {
				t.Fatal("failedAppend not set")
			}
			switch op {
			case "remove":
				if err := e.Remove("victim"); err != nil {
					t.Fatal(err)
				}
			case "rename":
				if err := e.Rename("victim", "renamed"); err != nil {
					t.Fatal(err)
				}
			case "truncate":
				if err := v.Truncate(4096); err != nil {
					t.Fatal(err)
				}
			}
			e = powerCutReopen(t, e, devName, cfg)
			defer e.Close()
			switch op {
			case "remove":
				if _, err := e.Stat("victim"); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("acknowledged remove undone by a power cut: stat victim: %v", err)
				}
			case "rename":
				if _, err := e.Stat("renamed"); err != nil {
					t.Fatalf("acknowledged rename undone by a power cut: stat renamed: %v", err)
				}
			case "truncate":
				fi, err := e.Stat("victim")
				if err != nil {
					t.Fatal(err)
				}
				if fi.Size != 4096 {
					t.Fatalf("acknowledged truncate to 4096 undone by a power cut: size %d", fi.Size)
				}
			}
		})
	}
}
