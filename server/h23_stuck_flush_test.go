package server

// A daemon stopped (SIGTERM) while a client's fsync waits for a device
// flush that never returns: a device that stopped answering flushes.
// docs/protocol.md promises that fsync's answer means the data survives a
// crash, and cli serve that a request stuck on such a device is given up
// after the grace periods and the engine's wait, the daemon saying
// whether acknowledged data may not be durable.
//
// It could fail if shutdown waited for the flush without bound, if the
// fsync were answered OK although no flush covering its data returned
// (the client would trust data that a crash loses), if nothing said that
// acknowledged data may not be durable, or if the device did not open
// again with fsck clean and every byte fsynced before the stall intact.
// The next daemon opens the device as after a power cut: the stalled
// daemon is still alive and still stuck in its flush (its process would
// be killed), and it is released only when the test ends. About 8 s.

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestH23ShutdownWithAnFsyncStuckInTheDeviceFlush(t *testing.T) {
	cold := h22dPattern(3, 64<<10)
	grace := 100 * time.Millisecond
	d := h22dServe(t, cold, grace, 2*time.Second)
	sd, e, srv, logBuf := d.sd, d.e, d.srv, d.log
	bg := context.Background()

	c := dial(t, d.socket)
	defer c.Close()
	acked := h22dPattern(9, 256<<10)
	h22dWrite(t, c, "acked", acked, true)
	hp := h22dWrite(t, c, "pending", h22dPattern(5, 64<<10), false)
	sd.flushArmed.Store(true)
	synced := make(chan error, 1)
	go func() { synced <- c.Fsync(bg, hp) }()
	select {
	case <-sd.held:
	case err := <-synced:
		t.Fatalf("the fsync was answered (%v) without a device flush", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the fsync did not reach the device's flush within 10 s")
	}

	start := time.Now()
	d.stop() // SIGTERM
	bound := 3*grace + srv.engineDrain + 5*time.Second
	var serveErr error
	select {
	case serveErr = <-d.served:
	case <-time.After(bound + 10*time.Second):
		t.Fatalf("Serve did not return within %v of SIGTERM with an fsync stuck in the device's flush (documented bound about %v); log:\n%s",
			bound+10*time.Second, bound, logBuf.String())
	}
	t.Logf("Serve returned after %v: %v", time.Since(start), serveErr)
	if serveErr == nil {
		t.Errorf("Serve returned nil with an fsync stuck in the device's flush: serve would exit 0")
	}
	closed := make(chan error, 1)
	go func() { closed <- e.Close() }() // as Run does after Serve
	var cerr error
	select {
	case cerr = <-closed:
	case <-time.After(15 * time.Second):
		t.Fatal("the engine's Close after Serve did not return within 15 s")
	}
	t.Logf("engine Close: %v", cerr)
	if cerr == nil || !strings.Contains(cerr.Error(), "may not be durable") {
		t.Errorf("engine Close with the device's flush stuck: %v, want it to say acknowledged data may not be durable", cerr)
	}
	select {
	case err := <-synced:
		if err == nil {
			t.Errorf("the fsync was answered OK while no device flush had returned")
		}
		t.Logf("the fsync's answer: %v", err)
	default: // unanswered: its connection is left to the process's exit
	}

	// The next daemon, as after a power cut of the stalled one.
	e2 := d.reopen(t)
	h22dCheckFiles(t, e2, map[string][]byte{"acked": acked, "cold": cold})
}
