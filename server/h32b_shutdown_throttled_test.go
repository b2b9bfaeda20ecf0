package server

// The daemon shuts down while writers are throttled behind dirty data
// whose writeback the device holds: every write the daemon took must get
// its own reply (a result or an error), whichever framing its client
// uses, and every write acknowledged must be on the device when the
// engine is opened again.

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/zns"
)

// h32bWriter is one client writing 64 KiB at a time, one write in
// flight, each write's bytes all one value (its sequence number, never
// 0), until a write fails or its reply does not come.
type h32bWriter struct {
	c       *Client
	framing bool
	name    string
	h       uint32
	// Filled by run: per offset, the value of the last write
	// acknowledged there, and of the write after it whose fate the
	// client does not know (0: none).
	acked, unknown map[int64]byte
	replies        int   // replies received to the writes
	last           Reply // the last reply received
	end            error // why it stopped: Recv's error, or nil (a reply that is not OK)
}

const h32bSpan = 4 << 20 // each writer cycles over its file's first 4 MiB

func (w *h32bWriter) run() {
	const bs = 64 << 10
	w.acked, w.unknown = map[int64]byte{}, map[int64]byte{}
	reps := make([]Reply, MaxBatch)
	for seq := 1; ; seq++ {
		off := int64((seq - 1) * bs % h32bSpan)
		v := byte(seq%255 + 1)
		data := w.c.Data()[:bs]
		for i := range data {
			data[i] = v
		}
		w.unknown[off] = v
		if err := w.c.Submit([]Request{{Tag: uint64(seq), Op: OpWrite, Handle: w.h, Off: uint64(off), Len: bs}}); err != nil {
			w.end = err
			return
		}
		n, err := w.c.Recv(reps)
		if err != nil {
			w.end = err
			return
		}
		w.replies += n
		w.last = reps[0]
		if n != 1 || reps[0].Tag != uint64(seq) || reps[0].Status != StatusOK || reps[0].Val != bs {
			return
		}
		delete(w.unknown, off)
		w.acked[off] = v
	}
}

// h32bCheckDurable opens the engine again on d's device (d's engine
// closed) and checks that every writer's acknowledged writes are there:
// at each offset, the value of the last write acknowledged, or of the
// one after it whose fate the client does not know.
func h32bCheckDurable(t *testing.T, d *h31bDaemon, cfg engine.Config, ws []*h32bWriter) {
	t.Helper()
	dev, err := zns.Open(d.device, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.OpenDevice(dev, cfg)
	if err != nil {
		t.Fatalf("open the engine again: %v", err)
	}
	defer e.Close()
	buf := make([]byte, 64<<10)
	for _, w := range ws {
		f, err := e.Open(w.name)
		if err != nil {
			t.Errorf("%s: %v", w.name, err)
			continue
		}
		for off, v := range w.acked {
			clear(buf)
			if _, err := f.ReadAt(buf, off); err != nil {
				t.Errorf("%s at %d: %v", w.name, off, err)
				continue
			}
			want := bytes.Repeat([]byte{v}, len(buf))
			alt := want
			if u := w.unknown[off]; u != 0 {
				alt = bytes.Repeat([]byte{u}, len(buf))
			}
			if !bytes.Equal(buf, want) && !bytes.Equal(buf, alt) {
				t.Errorf("%s at %d: acknowledged write of %#x lost after the shutdown (first byte %#x)", w.name, off, v, buf[0])
			}
		}
		f.Close()
	}
}

// TestH32bShutdownAnswersThrottledWrites: eight clients (every other
// one with socket framing) each have a write throttled in the daemon
// behind dirty data whose writeback the device holds when the daemon is
// told to stop. In "released" the device answers within the grace
// period: the throttled writes go on, and each is answered. In
// "aborted" it answers only after the grace period, when shutdown
// cancels the requests still running: each throttled write is then
// answered with an error. Either way no client may see its connection
// end with a write the daemon took unanswered (the replies the clients
// received are every request the daemon read), and after the engine is
// closed and opened again, every write acknowledged is on the device.
func TestH32bShutdownAnswersThrottledWrites(t *testing.T) {
	for _, tc := range []struct {
		name  string
		grace time.Duration
	}{{"released", 5 * time.Second}, {"aborted", 300 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := engine.Config{CacheBytes: 16 << 20, DirtyLimit: 2 << 20, ReadaheadMax: -1}
			d := h31bServeGrace(t, make([]byte, 64<<10), cfg, tc.grace)
			ctx := context.Background()
			const n = 8
			ws := make([]*h32bWriter, n)
			for i := range ws {
				w := &h32bWriter{framing: i%2 == 1, name: fmt.Sprintf("w%d", i)}
				w.c = h31bDial(t, d.socket, w.framing, 1<<20)
				var err error
				if w.h, _, err = w.c.Open(ctx, w.name, OpenCreate); err != nil {
					t.Fatal(err)
				}
				ws[i] = w
			}
			in0 := d.srv.stats.requestsIn.Load()
			d.dev.writes.hold()
			t.Cleanup(d.dev.writes.release)
			var wg sync.WaitGroup
			for _, w := range ws {
				wg.Go(w.run)
			}
			h31bEventually(t, "writes throttled (as many as there are writers)", func() bool {
				return d.e.WritesThrottled() && d.e.Stats().Cache.Throttles >= n
			})
			d.stop()
			if tc.name == "released" {
				time.Sleep(50 * time.Millisecond) // into the shutdown's waits
			} else {
				// Until the grace period ends and shutdown cancels
				// the throttled writes (abort); then the device
				// answers (a canceled extending write logs its
				// file's size: the device must answer for that).
				h31bEventually(t, "shutdown canceled the requests of every connection", func() bool {
					d.srv.mu.Lock()
					defer d.srv.mu.Unlock()
					for c := range d.srv.conns {
						if c.ctx.Err() == nil {
							return false
						}
					}
					return true
				})
			}
			d.dev.writes.release()
			var served error
			select {
			case served = <-d.served:
				d.served <- served
			case <-time.After(60 * time.Second):
				t.Fatal("Serve did not return within 60 s")
			}
			waited := make(chan struct{})
			go func() { wg.Wait(); close(waited) }()
			select {
			case <-waited:
			case <-time.After(30 * time.Second):
				t.Fatal("a writer's call did not end within 30 s of Serve's return")
			}
			got := 0
			for _, w := range ws {
				got += w.replies
				t.Logf("%s (framing=%v): %d writes answered, %d acknowledged offsets; last reply %+v; end %v",
					w.name, w.framing, w.replies, len(w.acked), w.last, w.end)
			}
			t.Logf("requests canceled: %d", d.srv.stats.canceled.Load())
			if in := d.srv.stats.requestsIn.Load() - in0; int64(got) != in {
				t.Errorf("the daemon took %d writes; its clients got %d replies (Serve: %v)", in, got, served)
				for _, w := range ws {
					if w.end != nil && len(w.unknown) > 0 {
						t.Errorf("%s (framing=%v): connection ended with its write unanswered: %v", w.name, w.framing, w.end)
					}
				}
			}
			if err := d.e.Close(); err != nil {
				t.Logf("engine Close: %v", err)
			}
			h32bCheckDurable(t, d, cfg, ws)
		})
	}
}
