package server

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"syscall"
	"testing"

	"github.com/zonefold/zonefold/internal/syncbuf"
	"github.com/zonefold/zonefold/zns"
)

// TestDeviceErrorsReachTheClientAndTheLogSaysWhich: the client gets only
// an errno, so the daemon's log must say what failed and for which file.
// An append that fails at writeback, a device flush that fails, and a
// zone gone read-only under the file's appends each make the file's next
// fsync fail with EIO at the client, log an error that names the file,
// and leave the daemon serving: the fsync after succeeds and the data
// reads back.
func TestDeviceErrorsReachTheClientAndTheLogSaysWhich(t *testing.T) {
	var logs syncbuf.Buffer
	socket, emu, _ := newTestServerEmu(t, Options{Log: slog.New(slog.NewTextHandler(&logs, nil))})
	c := dial(t, socket)
	ctx := context.Background()
	faults := []struct {
		file string
		arm  func(name string)
	}{
		{"append-fails", func(string) { emu.FailWrite(1) }},
		{"flush-fails", func(string) { emu.FailFlush(1) }},
		{"zone-read-only", func(string) {
			// The zone the file's first fsync opened for it: an
			// emptied device, so the newest open zone.
			var zones [64]zns.Zone
			n, err := emu.Report(0, zones[:])
			if err != nil {
				t.Fatal(err)
			}
			for i := n - 1; i >= 0; i-- {
				if zones[i].Cond.Open() {
					if err := emu.ZoneReadOnly(i); err != nil {
						t.Fatal(err)
					}
					return
				}
			}
			t.Fatal("no open zone to make read-only")
		}},
	}
	for _, f := range faults {
		h, _, err := c.Open(ctx, f.file, OpenCreate)
		if err != nil {
			t.Fatal(err)
		}
		first := bytes.Repeat([]byte(f.file), 4000)
		if _, err := c.WriteAt(ctx, h, first, 0); err != nil {
			t.Fatal(err)
		}
		if err := c.Fsync(ctx, h); err != nil {
			t.Fatal(err)
		}
		second := bytes.Repeat([]byte("second "), 9000)
		if _, err := c.WriteAt(ctx, h, second, int64(len(first))); err != nil {
			t.Fatal(err)
		}
		mark := len(logs.String())
		f.arm(f.file)
		err = c.Fsync(ctx, h)
		if !errors.Is(err, syscall.EIO) {
			t.Fatalf("%s: fsync: %v, want EIO", f.file, err)
		}
		logged := logs.String()[mark:]
		if !strings.Contains(logged, "level=ERROR") || !strings.Contains(logged, `\"`+f.file+`\"`) {
			t.Fatalf("%s: the fsync failed with EIO, and the daemon's log does not name the file in an error:\n%s", f.file, logged)
		}
		if err := c.Fsync(ctx, h); err != nil {
			t.Fatalf("%s: the fsync after the failure: %v", f.file, err)
		}
		want := append(first, second...)
		got := make([]byte, len(want))
		if n, err := c.ReadAt(ctx, h, got, 0); n != len(got) || !bytes.Equal(got, want) {
			t.Fatalf("%s: read back %d bytes, %v, equal %v", f.file, n, err, bytes.Equal(got, want))
		}
		if err := c.CloseFile(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
}
