package server

// A daemon stopped (SIGTERM: Serve's context canceled) while a client's
// read is stuck in the device: the device read was submitted and its
// completion does not arrive. docs/protocol.md ("shutdown") and cli
// serve promise that such a request is given up after the grace periods
// and the engine's minute-long wait, that the daemon then writes back,
// flushes and checkpoints without it and exits 1 saying how many
// requests were given up and whether acknowledged data is durable, and
// that everything an fsync acknowledged is served by the next daemon.
//
// The existing shutdown tests hold a request before it reaches the
// engine (execHook) or in an engine wait that Close wakes; none holds
// one inside the engine in device I/O, where the engine's drain times
// out and Close takes its abandoned path under a live server. The
// device here is the emu wrapped so that one read's completion is held
// (stuckReadDevice); the rest of the stack is the daemon's own.
//
// It could fail if shutdown waited for the stuck request without bound
// (the guard fires), if the engine's abandoned close deadlocked behind
// the read (Run's Close after Serve would hang or take long), if no log
// line or error said what was left, or if acknowledged data were lost
// or the device left unopenable (the reopen, fsck and block-by-block
// compare below), or if the stuck read kept the closing writeback, flush
// and checkpoint from making acknowledged, never-fsynced data durable:
// on main at 930570f the readahead workers, stuck in the same reads,
// were background work Close's writeback waited for, so it gave up the
// flush and checkpoint after 5 s and a file written before the SIGTERM
// came back empty.
//
// The engine's minute is shortened to 2 s (Server.engineDrain), so the
// test takes about 7 s.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/internal/syncbuf"
	"github.com/zonefold/zonefold/uring"
	"github.com/zonefold/zonefold/zns"
)

// stuckReadDevice is a device whose reads, once armed, complete only
// when released: a device that stopped answering reads. With flushArmed,
// its flushes do not return until released either (one that stopped
// answering flushes); held is closed at the first held read or flush.
type stuckReadDevice struct {
	zns.Device
	armed      atomic.Bool
	flushArmed atomic.Bool
	held       chan struct{} // see above
	heldOnce   sync.Once
	rel        chan struct{}
	relOnce    sync.Once
}

func newStuckReadDevice(d zns.Device) *stuckReadDevice {
	return &stuckReadDevice{Device: d, held: make(chan struct{}), rel: make(chan struct{})}
}

func (d *stuckReadDevice) Read(off int64, buf []byte, c uring.Completion) error {
	if !d.armed.Load() {
		return d.Device.Read(off, buf, c)
	}
	d.heldOnce.Do(func() { close(d.held) })
	return d.Device.Read(off, buf, heldCompletion{c, d.rel})
}

func (d *stuckReadDevice) Flush() error {
	if d.flushArmed.Load() {
		d.heldOnce.Do(func() { close(d.held) })
		<-d.rel
	}
	return d.Device.Flush()
}

func (d *stuckReadDevice) release() { d.relOnce.Do(func() { close(d.rel) }) }

// heldCompletion delivers a completion only once rel is closed.
type heldCompletion struct {
	c   uring.Completion
	rel chan struct{}
}

func (h heldCompletion) Complete(r uring.Result) {
	go func() {
		<-h.rel
		h.c.Complete(r)
	}()
}

func h22dPattern(seed byte, n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = seed ^ byte(i*7+i>>12)
	}
	return p
}

// h22dServing is a daemon in this process (Serve, as Run drives it) on
// an emu device whose reads can be held (stuckReadDevice), serving a
// file "cold" written and closed before it started.
type h22dServing struct {
	device string
	cfg    engine.Config
	sd     *stuckReadDevice
	e      *engine.Engine
	srv    *Server
	socket string
	log    *syncbuf.Buffer
	stop   context.CancelFunc // SIGTERM
	served chan error         // Serve's result
}

// coldDevice formats device, writes cold to "cold" with an engine of its
// own (so nothing of it is in a daemon's cache) and returns the device
// opened again.
func coldDevice(t *testing.T, device string, cfg engine.Config, cold []byte) zns.Device {
	t.Helper()
	dev, err := zns.Open(device, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.FormatAndOpen(dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	f, err := e.Create("cold")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(cold, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if dev, err = zns.Open(device, zns.Options{}); err != nil {
		t.Fatal(err)
	}
	return dev
}

// h22dServe formats an emu device, writes cold to "cold" with an engine
// of its own (so nothing of it is in the daemon's cache) and serves the
// device with the given grace period and engine drain bound (0: Close's
// minute).
func h22dServe(t *testing.T, cold []byte, grace, drain time.Duration) *h22dServing {
	t.Helper()
	d := &h22dServing{
		device: fmt.Sprintf("emu:%s?zone_size=4M&zones=32", filepath.Join(t.TempDir(), "dev")),
		cfg:    engine.Config{CacheBytes: 16 << 20, DirtyLimit: 8 << 20},
		socket: filepath.Join(t.TempDir(), "zf.sock"),
		log:    &syncbuf.Buffer{},
		served: make(chan error, 1),
	}
	dev := coldDevice(t, d.device, d.cfg, cold)
	d.sd = newStuckReadDevice(dev)
	t.Cleanup(d.sd.release)
	var err error
	if d.e, err = engine.OpenDevice(d.sd, d.cfg); err != nil {
		t.Fatal(err)
	}
	l, err := Listen(d.socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	d.srv = New(d.e, Options{Log: slog.New(slog.NewTextHandler(d.log, nil)), Grace: grace})
	d.srv.engineDrain = drain
	ctx, stop := context.WithCancel(context.Background())
	d.stop = stop
	t.Cleanup(stop)
	go func() { d.served <- d.srv.Serve(ctx, l.UnixListener) }()
	return d
}

// reopen is the next daemon's start on the device: fsck finds no damage
// and an engine opens it (closed at the test's end).
func (d *h22dServing) reopen(t *testing.T) *engine.Engine {
	t.Helper()
	dev, err := zns.Open(d.device, zns.Options{})
	if err != nil {
		t.Fatalf("reopen the device: %v", err)
	}
	rep, err := engine.Fsck(dev)
	dev.Close()
	if err != nil {
		t.Fatalf("fsck: %v", err)
	}
	if len(rep.Problems) > 0 {
		t.Errorf("fsck after the shutdown: %q", rep.Problems)
	}
	e, err := engine.Open(d.device, d.cfg)
	if err != nil {
		t.Fatalf("engine.Open after the shutdown: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func TestH22dShutdownWithAReadStuckInTheDevice(t *testing.T) {
	// The file the stuck read reads, cold in the daemon's cache.
	cold := h22dPattern(3, 512<<10)
	grace := 100 * time.Millisecond
	d := h22dServe(t, cold, grace, 2*time.Second) // the engine's minute, shortened
	sd, e, srv, socket, logBuf, stop, served := d.sd, d.e, d.srv, d.socket, d.log, d.stop, d.served
	bg := context.Background()

	// Acknowledged through the daemon: written, fsynced, answered OK.
	w := dial(t, socket)
	acked := h22dPattern(9, 1<<20+4096)
	h22dWrite(t, w, "acked", acked, true)
	// Written, never fsynced: the closing writeback makes it durable.
	h22dWrite(t, w, "dirty", h22dPattern(5, 64<<10), false)

	r := dial(t, socket)
	hc, _, err := r.Open(bg, "cold", 0)
	if err != nil {
		t.Fatal(err)
	}
	sd.armed.Store(true)
	type readResult struct {
		n   int
		buf []byte
		err error
	}
	read := make(chan readResult, 1)
	go func() {
		buf := make([]byte, 128<<10)
		n, err := r.ReadAt(bg, hc, buf, 0)
		read <- readResult{n, buf, err}
	}()
	select {
	case <-sd.held:
	case res := <-read:
		t.Fatalf("the cold read returned (%d, %v) without reaching the device", res.n, res.err)
	case <-time.After(10 * time.Second):
		t.Fatal("the cold read did not reach the device within 10 s")
	}

	start := time.Now()
	stop() // SIGTERM
	// Documented: grace, cancel, grace, the engine's minute (here
	// engineDrain), 5 s for writeback and checkpoint, and a grace period
	// for the connections.
	bound := 3*grace + srv.engineDrain + 5*time.Second
	var serveErr error
	select {
	case serveErr = <-served:
	case <-time.After(bound + 10*time.Second):
		sd.release()
		t.Fatalf("Serve did not return within %v of SIGTERM with one read stuck in the device (documented bound about %v); log:\n%s",
			bound+10*time.Second, bound, logBuf.String())
	}
	took := time.Since(start)
	t.Logf("Serve returned after %v: %v", took, serveErr)
	if serveErr == nil || !strings.Contains(serveErr.Error(), "connections still open") {
		t.Errorf("Serve after a shutdown that left a read stuck in the device: %v, want an error that says a connection was left (serve exits 1)", serveErr)
	}
	if !strings.Contains(logBuf.String(), "connections outlived the engine's close") {
		t.Errorf("no log line says the stuck connection was left; log:\n%s", logBuf.String())
	}
	// Run closes the engine after Serve: its result is the close that
	// shutdown did, and it must say the stuck read was given up and
	// whether acknowledged data is durable.
	closeStart := time.Now()
	cerr := e.Close()
	if d := time.Since(closeStart); d > 10*time.Second {
		t.Errorf("Run's engine Close after Serve took %v", d)
	}
	t.Logf("engine Close: %v", cerr)
	// The count is of engine operations: the client's read and the
	// readahead it started, all in the same stuck device reads. A read
	// holds no lock and writes nothing: the closing writeback, device
	// flush and checkpoint need not wait for it, so everything
	// acknowledged is durable, the never-fsynced "dirty" too (checked
	// after the restart below). Readahead workers were background work
	// that Close's writeback waited for: stuck in the same reads, they
	// made it give up the flush and checkpoint ("may not be durable").
	if cerr == nil || !strings.Contains(cerr.Error(), "stopped waiting for") ||
		!strings.Contains(cerr.Error(), "all acknowledged data is durable") {
		t.Errorf("engine Close after a read stuck in the device: %v, want it to say operations were given up and that all acknowledged data is durable (a stuck read holds up no writeback)", cerr)
	}

	// The device answers again: the stuck read ends, with an error or
	// with the right bytes, not a hang and not other bytes.
	sd.release()
	select {
	case res := <-read:
		if res.err == nil && !bytes.Equal(res.buf[:res.n], cold[:res.n]) {
			t.Errorf("the stuck read was answered OK after the shutdown with %d bytes that are not the file's", res.n)
		}
		t.Logf("the stuck read ended after release: %d bytes, %v", res.n, res.err)
	case <-time.After(10 * time.Second):
		t.Errorf("the stuck read did not end within 10 s of the device answering")
	}
	w.Close()
	r.Close()

	// The next daemon: the device opens, fsck finds no damage, and every
	// fsynced byte is there.
	e2 := d.reopen(t)
	h22dCheckFiles(t, e2, map[string][]byte{"acked": acked, "cold": cold, "dirty": h22dPattern(5, 64<<10)})
}

// h22dCheckFiles checks that each named file of e holds exactly its
// bytes, as acknowledged before the restart.
func h22dCheckFiles(t *testing.T, e *engine.Engine, files map[string][]byte) {
	t.Helper()
	for name, data := range files {
		f, err := e.Open(name)
		if err != nil {
			t.Errorf("%s after restart: %v", name, err)
			continue
		}
		got := make([]byte, len(data)+4096)
		n, err := f.ReadAt(got, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			t.Errorf("%s after restart: read: %v", name, err)
		}
		got = got[:n]
		if n != len(data) {
			t.Errorf("%s after restart: %d bytes, want the %d acknowledged", name, n, len(data))
		}
		for b := 0; b < min(n, len(data)); b += 4096 {
			end := min(b+4096, n, len(data))
			if !bytes.Equal(got[b:end], data[b:end]) {
				t.Errorf("%s after restart: block at %d differs from what was acknowledged", name, b)
				break
			}
		}
		f.Close()
	}
}

// h22dWrite opens (creating) name through c and writes data to it in
// 256 KiB requests, then fsyncs it if sync; it returns the handle.
func h22dWrite(t *testing.T, c *Client, name string, data []byte, sync bool) uint32 {
	t.Helper()
	bg := context.Background()
	h, _, err := c.Open(bg, name, OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(data); off += 256 << 10 {
		end := min(off+256<<10, len(data))
		if _, err := c.WriteAt(bg, h, data[off:end], int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	if sync {
		if err := c.Fsync(bg, h); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// A write stuck on the device (a partial block of a cold file, whose
// read-modify-write read does not complete) when the daemon is stopped,
// and the device answers again while the engine's close waits for it
// (past both grace periods, within the engine's minute). The stop is then
// clean: shutdown waited for the write, so the write is answered, and if
// it is answered OK the clean close wrote it back: the daemon promises
// "finish in-flight requests, flush, checkpoint, exit 0". It could fail
// if the write, ending after the cache was shut, were answered OK and
// not written back (lost on a clean stop), if it were answered with
// other bytes on the device than it wrote, if Serve or the close said
// anything was left, or if they took near the engine's minute (the
// close did not notice the operation ending). About 2 s.
func TestH22dShutdownWithAWriteStuckInTheDeviceThatEndsDuringClose(t *testing.T) {
	cold := h22dPattern(3, 64<<10)
	grace := 100 * time.Millisecond
	d := h22dServe(t, cold, grace, 0)
	sd, e, socket, logBuf, stop, served := d.sd, d.e, d.socket, d.log, d.stop, d.served
	bg := context.Background()
	c := dial(t, socket)
	h, _, err := c.Open(bg, "cold", 0)
	if err != nil {
		t.Fatal(err)
	}
	sd.armed.Store(true)
	patch := bytes.Repeat([]byte{0xee}, 100)
	wrote := make(chan error, 1)
	go func() {
		_, err := c.WriteAt(bg, h, patch, 1000)
		wrote <- err
	}()
	select {
	case <-sd.held:
	case err := <-wrote:
		t.Fatalf("the partial write returned (%v) without reading the device", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the partial write did not read the device within 10 s")
	}
	start := time.Now()
	stop() // SIGTERM
	// Past the grace period and the cancellation: the engine's close is
	// waiting for the write.
	time.Sleep(5 * grace)
	if !strings.Contains(logBuf.String(), "closing the engine under them") {
		t.Fatalf("the engine was not being closed %v after SIGTERM; log:\n%s", 5*grace, logBuf.String())
	}
	sd.release()
	var serveErr error
	select {
	case serveErr = <-served:
	case <-time.After(30 * time.Second):
		t.Fatalf("Serve did not return within 30 s of the device answering; log:\n%s", logBuf.String())
	}
	took := time.Since(start)
	var werr error
	select {
	case werr = <-wrote:
	case <-time.After(10 * time.Second):
		t.Fatal("the write was not answered within 10 s of Serve returning")
	}
	cerr := e.Close() // as Run does
	t.Logf("Serve after %v: %v; write: %v; engine Close: %v", took, serveErr, werr, cerr)
	if serveErr != nil {
		t.Errorf("Serve: %v, want nil: the stuck write ended while the engine closed", serveErr)
	}
	if cerr != nil {
		t.Errorf("engine Close: %v, want nil: nothing was left running", cerr)
	}
	if took > 20*time.Second {
		t.Errorf("Serve took %v after SIGTERM with the device answering at %v", took, 5*grace)
	}
	c.Close()

	e2 := d.reopen(t)
	f, err := e2.Open("cold")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, len(cold))
	if n, err := f.ReadAt(got, 0); n != len(cold) {
		t.Fatalf("cold after restart: %d bytes (%v), want %d", n, err, len(cold))
	}
	want := bytes.Clone(cold)
	if werr == nil {
		copy(want[1000:], patch) // answered OK on a clean stop: written back
	}
	for b := 0; b < len(want); b += 4096 {
		if !bytes.Equal(got[b:b+4096], want[b:b+4096]) {
			t.Errorf("cold after restart: block at %d is not what was acknowledged (write answered %v)", b, werr)
		}
	}
}
