package engine

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zonefold/zonefold/zns"
)

// lostAppends is a device that, once armed, takes appends and never
// completes them: a device that stopped answering its writes.
type lostAppends struct {
	zns.Device
	armed atomic.Bool
	taken atomic.Int64
}

func (d *lostAppends) Append(zone int, bufs [][]byte, c zns.AppendCompletion) error {
	if d.armed.Load() {
		d.taken.Add(1)
		return nil
	}
	return d.Device.Append(zone, bufs, c)
}

// TestCloseReturnsWithWritebackStuckInTheDevice: dirty data, never
// fsynced, whose writeback the device never completes; no operation is
// running. Close must return within its bounds with an error that says
// data may not be durable, as it does for an fsync stuck in a flush,
// rather than wait in its own writeback for ever (SIGTERM of a daemon on
// a device that stopped answering never ended).
//
// Close() bounds its drain with closeDrainWait (a minute); the test
// gives CloseContext a short context to stay inside within's 30 s.
func TestCloseReturnsWithWritebackStuckInTheDevice(t *testing.T) {
	lost := &lostAppends{}
	e := formatOpenThrough(t, emuDevice(t, 16, "1M", ""), smallConfig(), func(emu *zns.Emu) zns.Device {
		lost.Device = emu
		return lost
	})
	f := mustCreate(t, e, "a")
	lost.armed.Store(true)
	if _, err := f.WriteAt(bytes.Repeat([]byte{1}, 64<<10), 0); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	go func() { closed <- e.CloseContext(ctx) }()
	err := within(t, closed, "Close with a writeback append the device never completes")
	if lost.taken.Load() == 0 {
		t.Fatal("set-up: no append was taken and lost")
	}
	if err == nil || !strings.Contains(err.Error(), "may not be durable") && !strings.Contains(err.Error(), "lost") {
		t.Fatalf("Close: %v; want an error that says the data may not be durable", err)
	}
}
