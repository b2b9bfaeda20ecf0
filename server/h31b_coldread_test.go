package server

// Adversarial tests of the cold reads the connection's reader begins
// (startRead, engine.File.StartRead) and the reaper answers: clients
// that go while such reads are in the device, reads that must be read
// again after their client went, removals, renames, truncates and
// handle closes racing them, device errors on them, and more of them at
// once than the engine has read scratches. The device is the emu behind
// a wrapper that can hold every read's completion until released
// (h31bHoldDevice), so the reads are in flight when the test acts, not
// by timing.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/uring"
	"github.com/zonefold/zonefold/zns"
)

// h31bHoldDevice is a device whose reads, while held, complete only when
// released; it can hold again after a release.
type h31bHoldDevice struct {
	zns.Device
	emu   *zns.Emu
	mu    sync.Mutex
	gate  chan struct{} // nil: reads complete as they come
	heldN atomic.Int64  // reads held since hold
	// failIO: reads complete with EIO while it is set, held or not (bad
	// media: the engine reads a failed read again before it fails, and
	// that read must fail too).
	failIO atomic.Bool
	writes h31bWriteHold // holds writes and appends (h31b_throttle_test.go)
}

func (d *h31bHoldDevice) Append(zone int, bufs [][]byte, c zns.AppendCompletion) error {
	if g := d.writes.get(); g != nil {
		return d.Device.Append(zone, bufs, h31bHeldAppend{c, g})
	}
	return d.Device.Append(zone, bufs, c)
}

func (d *h31bHoldDevice) Write(zone int, off int64, bufs [][]byte, c uring.Completion) error {
	if g := d.writes.get(); g != nil {
		return d.Device.Write(zone, off, bufs, h31bHeldWrite{c, g})
	}
	return d.Device.Write(zone, off, bufs, c)
}

func (d *h31bHoldDevice) Read(off int64, buf []byte, c uring.Completion) error {
	d.mu.Lock()
	gate := d.gate
	d.mu.Unlock()
	if gate == nil {
		if d.failIO.Load() {
			c = h31bFailed{c}
		}
		return d.Device.Read(off, buf, c)
	}
	d.heldN.Add(1)
	return d.Device.Read(off, buf, h31bHeld{d, c, gate})
}

// hold makes reads submitted from now wait for release.
func (d *h31bHoldDevice) hold() {
	d.mu.Lock()
	d.gate = make(chan struct{})
	d.heldN.Store(0)
	d.mu.Unlock()
}

// release lets the held reads complete, and those to come go through.
func (d *h31bHoldDevice) release() {
	d.mu.Lock()
	if d.gate != nil {
		close(d.gate)
		d.gate = nil
	}
	d.mu.Unlock()
}

// h31bFailed completes a read with EIO whatever the device read.
type h31bFailed struct{ c uring.Completion }

func (f h31bFailed) Complete(uring.Result) { f.c.Complete(uring.Result{Res: -5}) }

type h31bHeld struct {
	d    *h31bHoldDevice
	c    uring.Completion
	gate chan struct{}
}

func (h h31bHeld) Complete(r uring.Result) {
	go func() {
		<-h.gate
		if h.d.failIO.Load() {
			r = uring.Result{Res: -5} // EIO
		}
		h.c.Complete(r)
	}()
}

// h31bDaemon is a daemon in this process on an emu device behind an
// h31bHoldDevice, serving "cold" (written with an engine of its own, so
// nothing of it is in the daemon's cache).
type h31bDaemon struct {
	dev    *h31bHoldDevice
	e      *engine.Engine
	srv    *Server
	socket string
	stop   context.CancelFunc
	served chan error
	device string // the emu's address, to open it again after the engine closed
}

func h31bServe(t *testing.T, cold []byte, cfg engine.Config) *h31bDaemon {
	t.Helper()
	return h31bServeGrace(t, cold, cfg, 5*time.Second)
}

// h31bServeGrace is h31bServe with the shutdown's grace period given.
func h31bServeGrace(t *testing.T, cold []byte, cfg engine.Config, grace time.Duration) *h31bDaemon {
	t.Helper()
	device := fmt.Sprintf("emu:%s?zone_size=4M&zones=32", filepath.Join(t.TempDir(), "dev"))
	dev := coldDevice(t, device, cfg, cold)
	d := &h31bDaemon{dev: &h31bHoldDevice{Device: dev, emu: dev.(*zns.Emu)},
		socket: filepath.Join(t.TempDir(), "zf.sock"), served: make(chan error, 1), device: device}
	var err error
	if d.e, err = engine.OpenDevice(d.dev, cfg); err != nil {
		t.Fatal(err)
	}
	l, err := Listen(d.socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	d.srv = New(d.e, Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Grace: grace})
	ctx, stop := context.WithCancel(context.Background())
	d.stop = stop
	go func() { d.served <- d.srv.Serve(ctx, l.UnixListener) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-d.served:
		case <-time.After(60 * time.Second):
			t.Error("the daemon did not stop within 60 s")
		}
		d.e.Close()
	})
	// First of the cleanups: a test that failed with reads held lets
	// them complete before the daemon is stopped.
	t.Cleanup(d.dev.release)
	return d
}

// h31bConfig: no readahead unless asked (the test's reads are the only
// ones), the test daemon's cache.
func h31bConfig() engine.Config {
	return engine.Config{CacheBytes: 32 << 20, DirtyLimit: 8 << 20, ReadaheadMax: -1}
}

// h31bEventually polls cond until it holds or the guard (generous: it
// only keeps a broken daemon from hanging the test) runs out.
func h31bEventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s: %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// h31bDial dials with a region of size bytes, rings or socket framing.
func h31bDial(t *testing.T, socket string, framing bool, size int) *Client {
	t.Helper()
	dialer := Dial
	if framing {
		dialer = DialSocketFraming
	}
	c, err := dialer(context.Background(), socket, size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// h31bOpenCold opens "cold" and reads its last 64k block through the
// client (a worker's read), which makes the file's cache state: a file's
// first read is never begun by the reader.
func h31bOpenCold(t *testing.T, c *Client, size int) uint32 {
	t.Helper()
	ctx := context.Background()
	h, _, err := c.Open(ctx, "cold", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadAt(ctx, h, make([]byte, 64<<10), int64(size-64<<10)); err != nil {
		t.Fatal(err)
	}
	return h
}

// h31bReads is n 64k reads of h at blocks first, first+stride, ...
// (mod blocks), into the region's first n*64k bytes, tags 1..n.
func h31bReads(h uint32, n, first, stride, blocks int) []Request {
	const bs = 64 << 10
	reqs := make([]Request, n)
	for i := range reqs {
		j := (first + i*stride) % blocks
		reqs[i] = Request{Tag: uint64(i + 1), Op: OpRead, Handle: h, Off: uint64(j * bs), Addr: uint64(i * bs), Len: bs}
	}
	return reqs
}

// h31bRecvAll receives n replies and returns them by tag.
func h31bRecvAll(t *testing.T, c *Client, n int) map[uint64]Reply {
	t.Helper()
	got := make(map[uint64]Reply, n)
	reps := make([]Reply, MaxBatch)
	for len(got) < n {
		k, err := c.Recv(reps)
		if err != nil {
			t.Fatalf("after %d of %d replies: %v", len(got), n, err)
		}
		for _, r := range reps[:k] {
			got[r.Tag] = r
		}
	}
	return got
}

// TestH31bColdReadsOfAClientThatWent: a client sends a batch of cold
// reads, which the reader begins (StartRead) and the device holds, and
// goes (its socket closed, its region unmapped). Released, the reads
// end with nobody to answer: the session must still end (every read's
// reply accounted for, the region unmapped only after), the reads'
// scratches and handle locks must come back, and the daemon must keep
// serving. In "again", another client overwrites half the held reads'
// folios first, so those end to be read again (readAgain's goroutine)
// after their client went.
//
// It could fail if a reply went into the gone session's region after
// its teardown (a crash under the race detector or a fault), if the
// session never ended (a read whose reply was never counted), if the
// reads' scratches leaked (the last part begins all 128 of a pool's
// reads while the device holds them: a scratch short, one fewer
// begins), or if readAgain's goroutines stayed.
func TestH31bColdReadsOfAClientThatWent(t *testing.T) {
	const bs, blocks = 64 << 10, 400
	cold := h22dPattern(31, blocks*bs)
	d := h31bServe(t, cold, h31bConfig())
	ctx := context.Background()
	goroutines := runtime.NumGoroutine()
	next := 0 // the next folio not read yet: each round reads cold ones
	for _, framing := range []bool{false, true} {
		for _, again := range []bool{false, true} {
			name := fmt.Sprintf("framing=%v/again=%v", framing, again)
			const n = 8
			c := h31bDial(t, d.socket, framing, n*bs+1<<20)
			h := h31bOpenCold(t, c, len(cold))
			reqs := h31bReads(h, n, next, 1, blocks-1)
			next += n
			st := d.e.Stats()
			d.dev.hold()
			if err := c.Submit(reqs); err != nil {
				t.Fatal(err)
			}
			h31bEventually(t, name+": the reader began every cold read", func() bool {
				return d.e.Stats().ColdReads-st.ColdReads == n && d.dev.heldN.Load() >= n
			})
			if again {
				// Overwrite every other held read's folio (in the
				// cache only: no device read needed).
				w := h31bDial(t, d.socket, false, 1<<20)
				wh, _, err := w.Open(ctx, "cold", 0)
				if err != nil {
					t.Fatal(err)
				}
				for i := 0; i < n; i += 2 {
					off := int64(reqs[i].Off)
					if _, err := w.WriteAt(ctx, wh, cold[off:off+bs], off); err != nil {
						t.Fatal(err)
					}
				}
				w.Close()
			}
			c.Close()
			d.dev.release()
			h31bEventually(t, name+": the session of the client that went ended", func() bool {
				return d.srv.Connections() == 0
			})
			after := d.e.Stats()
			t.Logf("%s: %d cold reads, %d late, %d to read again", name,
				after.ColdReads-st.ColdReads, after.ColdReadsLate-st.ColdReadsLate, after.ColdReadsAgain-st.ColdReadsAgain)
			if again && after.ColdReadsAgain-st.ColdReadsAgain == 0 {
				t.Errorf("%s: no read ended to be read again", name)
			}
		}
	}
	h31bEventually(t, "goroutines back to where they were", func() bool {
		return runtime.NumGoroutine() <= goroutines+2
	})
	// Every scratch is back: with the device held, 4 clients' 160 cold
	// reads begin 128 (the pool) in the reader.
	h31bAllScratches(t, d, cold, next, 4, 40)
}

// h31bAllScratches checks that every read scratch is free: one client's
// batch of 128 cold reads (the pool), from folio first on, all begin in
// the reader while the device holds them (a scratch short, one fewer
// would: it goes to a worker). Then clients clients send per cold reads
// each at once, more than the pool, with the device held and released:
// every one ends with the file's bytes, and no read left its handle
// locked.
func h31bAllScratches(t *testing.T, d *h31bDaemon, cold []byte, first, clients, per int) {
	t.Helper()
	const bs, pool = 64 << 10, 128
	blocks := len(cold)/bs - 1
	if pool+clients*per > blocks-first {
		t.Fatalf("%d reads of %d folios not read yet", pool+clients*per, blocks-first)
	}
	one := h31bDial(t, d.socket, false, pool*bs+1<<20)
	reqs := h31bReads(h31bOpenCold(t, one, len(cold)), pool, first, 1, blocks)
	st := d.e.Stats()
	d.dev.hold()
	if err := one.Submit(reqs); err != nil {
		t.Fatal(err)
	}
	h31bEventually(t, fmt.Sprintf("held, the reader began the %d cold reads of a batch (a read scratch short?)", pool), func() bool {
		return d.e.Stats().ColdReads-st.ColdReads >= pool && d.dev.heldN.Load() >= pool
	})
	d.dev.release()
	h31bCheckReads(t, one, reqs, cold)
	first += pool

	cs := make([]*Client, clients)
	creqs := make([][]Request, clients)
	for i := range cs {
		cs[i] = h31bDial(t, d.socket, i%2 == 1, per*bs+1<<20)
		creqs[i] = h31bReads(h31bOpenCold(t, cs[i], len(cold)), per, first+i*per, 1, blocks)
	}
	st = d.e.Stats()
	d.dev.hold()
	for i, c := range cs {
		if err := c.Submit(creqs[i]); err != nil {
			t.Fatal(err)
		}
	}
	h31bEventually(t, "reads held in the device", func() bool { return d.dev.heldN.Load() >= pool/2 })
	d.dev.release()
	for i, c := range cs {
		h31bCheckReads(t, c, creqs[i], cold)
	}
	t.Logf("%d clients: %d cold reads began in the readers of %d", clients, d.e.Stats().ColdReads-st.ColdReads, clients*per)
}

// h31bCheckReads receives the replies of reqs, checks each read's bytes
// and closes the handle (which waits for its lock: a read that kept it
// would hang the close).
func h31bCheckReads(t *testing.T, c *Client, reqs []Request, cold []byte) {
	t.Helper()
	got := h31bRecvAll(t, c, len(reqs))
	for _, q := range reqs {
		r := got[q.Tag]
		if r.Status != StatusOK || r.Val != uint64(q.Len) {
			t.Fatalf("read at %d: %+v", q.Off, r)
		}
		if !bytes.Equal(c.Data()[q.Addr:q.Addr+uint64(q.Len)], cold[q.Off:q.Off+uint64(q.Len)]) {
			t.Fatalf("read at %d: bytes differ from the file's", q.Off)
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- c.CloseFile(context.Background(), reqs[0].Handle) }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("close the handle: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("closing the handle the reads used did not end in 30 s (its lock kept?)")
	}
}

// TestH31bColdReadsRacingNamespaceAndHandleChanges: while a client's
// cold reads are held in the device, the file is removed, renamed over,
// truncated (through the reading handle, and through another) or the
// reading handle closed, from the same connection and from another.
// Nothing may wedge (a removal waited for the handle's lock while the
// reads held it, and the reaper must finish them without anything the
// removal holds), every read ends with the file's bytes or a clear
// error, and the daemon keeps serving.
func TestH31bColdReadsRacingNamespaceAndHandleChanges(t *testing.T) {
	const bs, blocks = 64 << 10, 64
	for _, change := range []string{"remove", "rename-over", "truncate-same", "truncate-other", "close-handle", "close-and-fstat"} {
		t.Run(change, func(t *testing.T) {
			cold := h22dPattern(7, blocks*bs)
			d := h31bServe(t, cold, h31bConfig())
			ctx := context.Background()
			const n = 32
			c := h31bDial(t, d.socket, false, n*bs+1<<20)
			h := h31bOpenCold(t, c, len(cold))
			other := h31bDial(t, d.socket, false, 1<<20)
			oh, _, err := other.Open(ctx, "cold", 0)
			if err != nil {
				t.Fatal(err)
			}
			if change == "rename-over" {
				wh, _, err := other.Open(ctx, "new", OpenCreate)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := other.WriteAt(ctx, wh, []byte("new"), 0); err != nil {
					t.Fatal(err)
				}
				if err := other.CloseFile(ctx, wh); err != nil {
					t.Fatal(err)
				}
			}
			reqs := h31bReads(h, n, 0, 7, blocks-1)
			st := d.e.Stats()
			d.dev.hold()
			batch := reqs
			switch change {
			case "truncate-same":
				batch = append(batch, Request{Tag: n + 1, Op: OpTruncate, Handle: h, Off: 3 * bs})
			case "close-handle":
				batch = append(batch, Request{Tag: n + 1, Op: OpClose, Handle: h})
			case "close-and-fstat":
				// The close waits for the reads' lock; an fstat (run by
				// the reader itself) behind it must not hold up the
				// reads' completion.
				batch = append(batch, Request{Tag: n + 1, Op: OpClose, Handle: h},
					Request{Tag: n + 2, Op: OpFstat, Handle: h})
			}
			if err := c.Submit(batch); err != nil {
				t.Fatal(err)
			}
			h31bEventually(t, "the reader began cold reads", func() bool {
				return d.e.Stats().ColdReads-st.ColdReads > 0 && d.dev.heldN.Load() > 0
			})
			changed := make(chan error, 1)
			go func() {
				switch change {
				case "remove":
					changed <- other.Remove(ctx, "cold")
				case "rename-over":
					changed <- other.Rename(ctx, "new", "cold")
				case "truncate-other":
					changed <- other.Truncate(ctx, oh, 3*bs)
				default:
					changed <- nil
				}
			}()
			// The change may wait for the reads (it must not
			// wedge once they complete) or not: either way, give it a
			// moment to get into its wait before the device answers.
			time.Sleep(20 * time.Millisecond)
			d.dev.release()
			select {
			case err := <-changed:
				if err != nil {
					t.Fatalf("%s: %v", change, err)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("%s did not end within 30 s of the reads' completion", change)
			}
			got := h31bRecvAll(t, c, len(batch))
			for _, q := range reqs {
				r := got[q.Tag]
				switch {
				case r.Status == StatusOK && r.Val == uint64(q.Len):
					if !bytes.Equal(c.Data()[q.Addr:q.Addr+uint64(q.Len)], cold[q.Off:q.Off+uint64(q.Len)]) {
						t.Errorf("read at %d: bytes differ from the file's", q.Off)
					}
				case r.Status == StatusOK && r.Val < uint64(q.Len) && change == "truncate-same":
					// Truncated before it (the same connection's truncate
					// may run first).
				case r.Status == StatusOK && r.Val < uint64(q.Len) && change == "truncate-other":
				case r.Status == StatusBadHandle && (change == "close-handle" || change == "close-and-fstat"):
				case r.Status == StatusNotExist && (change == "remove" || change == "rename-over"):
				default:
					t.Errorf("read at %d: %+v", q.Off, r)
				}
			}
			for tag := uint64(n + 1); tag <= uint64(len(batch)); tag++ {
				r := got[tag]
				if r.Status != StatusOK && !(batch[tag-1].Op == OpFstat && r.Status == StatusBadHandle) {
					t.Errorf("%v after the reads: %+v", batch[tag-1].Op, r)
				}
			}
			// The daemon still serves, on both connections.
			if _, err := other.Stat(ctx, "cold"); err != nil && change != "remove" {
				t.Errorf("stat after %s: %v", change, err)
			}
			if _, err := c.List(ctx); err != nil {
				t.Errorf("list after %s: %v", change, err)
			}
			if change != "close-handle" && change != "close-and-fstat" {
				if err := c.CloseFile(ctx, h); err != nil {
					t.Errorf("close the reading handle after %s: %v", change, err)
				}
			}
		})
	}
}

// TestH31bColdReadDeviceErrors: cold reads the reader began fail in the
// device (EIO), and so does every read until the device works again (a
// failed cold read is read again by a worker, ReadAtContext, which reads
// it again alone before it fails): each gets EIO, nothing of them is cached (the same
// reads, once the device works, return the file's bytes), and the
// connection keeps working.
func TestH31bColdReadDeviceErrors(t *testing.T) {
	const bs, blocks = 64 << 10, 32
	cold := h22dPattern(5, blocks*bs)
	d := h31bServe(t, cold, h31bConfig())
	for _, framing := range []bool{false, true} {
		c := h31bDial(t, d.socket, framing, 8*bs+1<<20)
		h := h31bOpenCold(t, c, len(cold))
		first := 0
		if framing {
			first = 8
		}
		reqs := h31bReads(h, 8, first, 1, blocks-1)
		st := d.e.Stats()
		d.dev.failIO.Store(true)
		d.dev.hold()
		if err := c.Submit(reqs); err != nil {
			t.Fatal(err)
		}
		h31bEventually(t, "the reader began the cold reads", func() bool {
			return d.e.Stats().ColdReads-st.ColdReads == 8
		})
		d.dev.release()
		got := h31bRecvAll(t, c, len(reqs))
		for _, q := range reqs {
			if r := got[q.Tag]; r.Status != StatusIO {
				t.Errorf("framing=%v: read at %d on a failing device: %+v, want EIO", framing, q.Off, r)
			}
		}
		d.dev.failIO.Store(false)
		clear(c.Data()[:8*bs])
		submitReads(t, c, reqs)
		for _, q := range reqs {
			if !bytes.Equal(c.Data()[q.Addr:q.Addr+uint64(q.Len)], cold[q.Off:q.Off+uint64(q.Len)]) {
				t.Fatalf("framing=%v: read at %d after the device recovered: bytes differ", framing, q.Off)
			}
		}
	}
}

// TestH31bShutdownWithColdReadsInFlight: the daemon is told to stop
// (Serve's context) while a client's cold reads are held in the device;
// once the device answers, Serve returns, the reads are answered, and
// the engine closes.
func TestH31bShutdownWithColdReadsInFlight(t *testing.T) {
	const bs, blocks = 64 << 10, 64
	cold := h22dPattern(9, blocks*bs)
	d := h31bServe(t, cold, h31bConfig())
	const n = 32
	c := h31bDial(t, d.socket, false, n*bs+1<<20)
	h := h31bOpenCold(t, c, len(cold))
	reqs := h31bReads(h, n, 0, 5, blocks-1)
	st := d.e.Stats()
	d.dev.hold()
	if err := c.Submit(reqs); err != nil {
		t.Fatal(err)
	}
	h31bEventually(t, "the reader began the cold reads", func() bool {
		return d.e.Stats().ColdReads-st.ColdReads > 0
	})
	d.stop()
	time.Sleep(20 * time.Millisecond) // into the shutdown's wait, if any
	d.dev.release()
	got := h31bRecvAll(t, c, n)
	for _, q := range reqs {
		if r := got[q.Tag]; r.Status != StatusOK || r.Val != uint64(q.Len) {
			t.Errorf("read at %d across the shutdown: %+v", q.Off, r)
		}
	}
	select {
	case err := <-d.served:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Logf("Serve: %v", err)
		}
		d.served <- err
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return within 30 s of the reads' completion")
	}
	closed := make(chan error, 1)
	go func() { closed <- d.e.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("engine Close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("engine Close did not return within 30 s")
	}
}

// TestH31bRepliesToAGoneRingClient: round after round, a client with
// rings sends cold reads the device holds and goes; released, the reads'
// replies are posted by the goroutines that finish them (the ring's
// reaper, here the device's completions) as the session ends. The post
// must be done with the session's region before the session counts the
// reply (inflight): the teardown unmaps the region once every reply is
// counted, and a post that still woke the client through the region's
// flags word then faulted, killing the daemon (SIGSEGV in wakeDue, under
// -race about one run in four of these tests before the fix). Each round is a chance for that window; a crash fails the
// test binary.
func TestH31bRepliesToAGoneRingClient(t *testing.T) {
	const bs, blocks, n, rounds = 64 << 10, 512, 16, 30
	cold := h22dPattern(11, blocks*bs)
	d := h31bServe(t, cold, h31bConfig())
	for round := range rounds {
		c := h31bDial(t, d.socket, false, n*bs+1<<20)
		h := h31bOpenCold(t, c, len(cold))
		reqs := h31bReads(h, n, round*n, 1, blocks-1)
		st := d.e.Stats()
		d.dev.hold()
		if err := c.Submit(reqs); err != nil {
			t.Fatal(err)
		}
		h31bEventually(t, "the reader began the cold reads", func() bool {
			return d.e.Stats().ColdReads-st.ColdReads == n && d.dev.heldN.Load() >= n
		})
		c.Close()
		// Let the session see its client go (it waits for the reads'
		// replies then), so that the last reply ends it: not needed for
		// the test to pass, only to make the window likelier.
		time.Sleep(5 * time.Millisecond)
		d.dev.release()
		h31bEventually(t, "the session of the client that went ended", func() bool {
			return d.srv.Connections() == 0
		})
	}
}

// TestH31bManyColdReadersWithReadahead: with readahead on, clients
// reading in order (which readahead follows, taking read scratches of
// its own) and clients reading at random, more reads in flight at once
// than there are read scratches, with the device holding reads for a
// while: every read ends with the file's bytes, and the handles close.
func TestH31bManyColdReadersWithReadahead(t *testing.T) {
	const bs, blocks = 64 << 10, 384
	cold := h22dPattern(13, blocks*bs)
	cfg := h31bConfig()
	cfg.ReadaheadMax = 0 // the default
	d := h31bServe(t, cold, cfg)
	const clients, per = 6, 64
	cs := make([]*Client, clients)
	reqs := make([][]Request, clients)
	span := (blocks - 1) / clients
	for i := range cs {
		cs[i] = h31bDial(t, d.socket, i%2 == 1, per*bs+1<<20)
		h := h31bOpenCold(t, cs[i], len(cold))
		stride := 1 // in order: readahead follows
		if i >= clients/2 {
			stride = 37 // at random, over the whole file
		}
		reqs[i] = h31bReads(h, per, i*span, stride, blocks-1)
	}
	st := d.e.Stats()
	d.dev.hold()
	for i, c := range cs {
		// In order in batches of 16, as a sequential reader would.
		for j := 0; j < per; j += 16 {
			if err := c.Submit(reqs[i][j : j+16]); err != nil {
				t.Fatal(err)
			}
		}
	}
	h31bEventually(t, "reads held in the device", func() bool { return d.dev.heldN.Load() >= 64 })
	d.dev.release()
	for i, c := range cs {
		h31bCheckReads(t, c, reqs[i], cold)
	}
	after := d.e.Stats()
	t.Logf("%d cold reads began in the readers of %d", after.ColdReads-st.ColdReads, clients*per)
}
