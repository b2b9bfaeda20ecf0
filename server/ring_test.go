package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"math/bits"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/engine"
)

func TestRingEntries(t *testing.T) {
	for _, tc := range []struct{ want, got uint32 }{
		{0, DefaultRingEntries}, {1, minRingEntries}, {9, 16}, {256, 256}, {257, 512},
		{MaxRingEntries, MaxRingEntries}, {MaxRingEntries + 1, MaxRingEntries},
	} {
		if got := ringEntries(tc.want); got != tc.got {
			t.Errorf("ringEntries(%d) = %d, want %d", tc.want, got, tc.got)
		}
	}
}

func TestCheckRing(t *testing.T) {
	const e = 8
	tests := []struct {
		name                         string
		head, sqTail, cqHead, cqTail uint32
		n                            uint32
		err                          error
	}{
		{"empty", 0, 0, 0, 0, 0, nil},
		{"full ring", 0, e, 0, 0, e, nil},
		{"wrapping", ^uint32(0) - 2, 3, ^uint32(0) - 2, ^uint32(0) - 2, 6, nil},
		{"tail past a ring", 0, e + 1, 0, 0, 0, errSQOverrun},
		{"tail behind the head", 5, 4, 5, 5, 0, errSQOverrun},
		{"cq head past the tail", 4, 4, 3, 2, 0, errCQPastTail},
		{"cq head a ring behind", 20, 20, 0, 20, 0, errCQPastTail},
		{"too many outstanding", 4, 9, 0, 4, 0, errOutstanding},
		{"exactly entries outstanding", 4, 8, 0, 0, 4, nil},
	}
	for _, tc := range tests {
		n, err := checkRing(tc.head, tc.sqTail, tc.cqHead, tc.cqTail, e)
		if n != tc.n || !errors.Is(err, tc.err) {
			t.Errorf("%s: %d, %v; want %d, %v", tc.name, n, err, tc.n, tc.err)
		}
	}
}

// FuzzCheckRing: whatever the client writes into its indices, what
// checkRing accepts keeps the daemon within its ring and its slots.
func FuzzCheckRing(f *testing.F) {
	f.Add(uint32(0), uint32(3), uint32(0), uint32(0), uint8(3))
	f.Add(^uint32(0), uint32(5), ^uint32(0)-1, ^uint32(0), uint8(4))
	f.Fuzz(func(t *testing.T, head, sqTail, cqHead, cqTail uint32, shift uint8) {
		e := uint32(1) << (shift % 13)
		// The daemon's own counters are consistent: no more replies
		// posted than requests taken, nor more outstanding than the ring.
		if cqTail-head > 0 && int32(head-cqTail) < 0 || head-cqTail > e {
			return
		}
		n, err := checkRing(head, sqTail, cqHead, cqTail, e)
		if err != nil {
			return
		}
		if n > e {
			t.Fatalf("%d new requests in a ring of %d", n, e)
		}
		if head+n-cqHead > e {
			t.Fatalf("%d outstanding with a ring of %d", head+n-cqHead, e)
		}
		// Slots in use after taking them: taken minus posted.
		if head+n-cqTail > e {
			t.Fatalf("%d slots needed, %d exist", head+n-cqTail, e)
		}
		if cqTail-cqHead > e {
			t.Fatalf("completion head %d and tail %d accepted", cqHead, cqTail)
		}
	})
}

// corrupt sets one of the client's ring words and rings the doorbell.
func corrupt(c *Client, off int, v uint32) {
	area := c.mapped[c.info.RingOff:]
	atomic.StoreUint32(word(area, off), v)
	c.doorbell()
}

// closedByDaemon waits for the daemon to close c's connection.
func closedByDaemon(t *testing.T, c *Client) {
	t.Helper()
	c.uc.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		_, err := c.uc.Read(make([]byte, 16))
		// A close with the client's doorbells unread resets.
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			return
		}
		if err != nil {
			t.Fatalf("waiting for the daemon to close a corrupt ring: %v", err)
		}
	}
}

// TestRingCorruptionClosesOnlyThatConnection: a client that writes
// impossible ring indices loses its connection, with a log line; other
// clients do not notice.
func TestRingCorruptionClosesOnlyThatConnection(t *testing.T) {
	d := newDaemon(t)
	ctx := context.Background()
	good := dial(t, d.socket)
	h, _, err := good.Open(ctx, "g", OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		spoil func(c *Client)
	}{
		{"submission tail a ring ahead", func(c *Client) { corrupt(c, RingSQTail, c.ring.entries+1) }},
		{"submission tail behind the head", func(c *Client) {
			c.Submit([]Request{{Tag: 1, Op: OpNop}})
			c.Recv(make([]Reply, MaxBatch))
			corrupt(c, RingSQTail, ^uint32(0))
		}},
		{"completion head past the tail", func(c *Client) {
			atomic.StoreUint32(c.ring.cqHead, 7)
			c.Submit([]Request{{Tag: 1, Op: OpNop}})
		}},
		{"more outstanding than the ring holds", func(c *Client) {
			reqs := make([]Request, MaxBatch)
			for i := range reqs {
				reqs[i] = Request{Tag: uint64(i), Op: OpNop}
			}
			for range c.ring.entries / MaxBatch {
				if err := c.Submit(reqs); err != nil {
					panic(err)
				}
			}
			// One more than the client may have outstanding, behind
			// Submit's back.
			c.ring.head++
			c.Submit(reqs[:1])
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bad := dial(t, d.socket)
			tc.spoil(bad)
			closedByDaemon(t, bad)
			if _, err := good.WriteAt(ctx, h, []byte("still here"), 0); err != nil {
				t.Fatalf("the other client noticed: %v", err)
			}
		})
	}
	if n := d.srv.stats.protocolErrors.Load(); n != int64(len(tests)) {
		t.Fatalf("%d protocol errors counted, want %d", n, len(tests))
	}
}

// TestRingClientThatNeverReapsCannotWedgeTheDaemon: a client fills its
// ring with writes and never consumes a reply. The daemon takes every
// request (the completion ring always has room for them), serves other
// clients, ends the session when the client goes, and shuts down at once
// with such a client connected.
func TestRingClientThatNeverReapsCannotWedgeTheDaemon(t *testing.T) {
	cfg := testConfig(emuDevice(t), filepath.Join(t.TempDir(), "zf.sock"))
	cfg.Grace = time.Minute // shutdown must not need it
	d := startDaemon(t, cfg)
	stats := &d.srv.stats
	// fill opens a file, then publishes a ring full of writes and
	// waits for the daemon to take them all and post every reply.
	fill := func() *Client {
		c := dial(t, d.socket)
		h, _, err := c.Open(context.Background(), "never-reaps", OpenCreate)
		if err != nil {
			t.Fatal(err)
		}
		base := stats.requestsIn.Load()
		reqs := make([]Request, 1)
		for i := range c.ring.entries {
			reqs[0] = Request{Tag: uint64(i + 1), Op: OpWrite, Handle: h, Off: uint64(i) * 4096, Len: 4096}
			if err := c.Submit(reqs); err != nil {
				t.Fatal(err)
			}
		}
		entries := int64(c.ring.entries)
		awaitProgress(t, "requests taken from a client that reaps no replies", base+entries, stats.requestsIn.Load)
		// The open's reply and one per write.
		awaitProgress(t, "replies posted for it", entries+1, func() int64 { return int64(atomic.LoadUint32(c.ring.cqTail)) })
		return c
	}
	bad := fill()

	ctx := context.Background()
	good := dial(t, d.socket)
	h, _, err := good.Open(ctx, "good", OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := good.WriteAt(ctx, h, []byte("served"), 0); err != nil {
		t.Fatal(err)
	}
	bad.Close()
	awaitProgress(t, "the session's end", 1, func() int64 { return int64(2 - d.connections()) })

	fill()
	start := time.Now()
	awaitShutdown(t, d)
	if time.Since(start) > cfg.Grace/2 {
		t.Fatalf("shutdown took %v: it waited on the client", time.Since(start))
	}
}

// FuzzRingSession writes what the fuzzer gives into a live connection's
// ring words and submission entries, rings the doorbell, and requires
// that the daemon either answers or closes that connection, and keeps
// serving another.
func FuzzRingSession(f *testing.F) {
	d := startDaemon(f, testConfig(emuDevice(f), filepath.Join(f.TempDir(), "zf.sock")))
	probe := dial(f, d.socket)
	seed := make([]byte, 2*RequestSize)
	(&Request{Tag: 1, Op: OpNop}).Encode(seed)
	(&Request{Tag: 2, Op: OpRead, Handle: 1, Len: 10}).Encode(seed[RequestSize:])
	f.Add(uint32(2), uint32(0), uint32(0), uint32(0), seed)
	f.Add(uint32(1<<31), uint32(5), uint32(1), uint32(1), seed)
	f.Add(uint32(3), uint32(^uint32(0)), uint32(0), uint32(0), []byte("junk"))
	f.Fuzz(func(t *testing.T, sqTail, cqHead, sqFlags, cqFlags uint32, sqes []byte) {
		c, err := Dial(context.Background(), d.socket, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		r := c.ring
		copy(r.sqes, sqes)
		area := c.mapped[c.info.RingOff:]
		atomic.StoreUint32(word(area, RingCQHead), cqHead)
		atomic.StoreUint32(word(area, RingSQFlags), sqFlags)
		atomic.StoreUint32(word(area, RingCQFlags), cqFlags)
		atomic.StoreUint32(word(area, RingSQTail), sqTail)
		c.doorbell()
		if _, err := checkRing(0, sqTail, cqHead, 0, r.entries); err != nil {
			closedByDaemon(t, c)
		} else {
			// Every request published gets its reply.
			awaitProgress(t, "replies to fuzzed requests", int64(sqTail), func() int64 { return int64(atomic.LoadUint32(r.cqTail)) })
		}
		if _, err := probe.Stat(context.Background(), "nothing"); !strings.Contains(err.Error(), "no such file") {
			t.Fatalf("the other client: %v", err)
		}
	})
}

// FuzzRingSteps runs a program of ring operations that the fuzzer
// writes against a live connection: publishing requests as a client
// should (nops, or requests of any opcode whose handle, offset, region
// range and flags sit at and around their limits: ranges that reach past
// the region or wrap, handles never opened, opcodes out of range, on a
// connection with a file open), and storing arbitrary values into the
// indices and flags a client controls, or into submission entries the
// daemon is reading, with a doorbell after each step (the want word and
// CQWant included). Whatever the program, the daemon either keeps
// answering that connection (a nop published at the end gets its reply)
// or closes it, and it keeps serving another client, whose data stays as
// it wrote it.
// Every index the daemon acts on is its own, so nothing the program
// does can make it read or write outside the ring.
func FuzzRingSteps(f *testing.F) {
	d := startDaemon(f, testConfig(emuDevice(f), filepath.Join(f.TempDir(), "zf.sock")))
	probe := dial(f, d.socket)
	step := func(op byte, v uint32) []byte {
		return []byte{op, byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)}
	}
	cat := func(steps ...[]byte) []byte { return bytes.Join(steps, nil) }
	f.Add(cat(step(0, 3), step(3, 0), step(0, 7)))
	f.Add(cat(step(0, 7), step(2, ^uint32(0)), step(0, 1)))
	f.Add(cat(step(0, 2), step(1, 9)))
	f.Add(cat(step(0, 5), step(4, 100), step(3, 0), step(5, 1), step(6, 1)))
	f.Add(cat(step(0, 7), step(0, 7), step(0, 7), step(0, 7), step(0, 7), step(3, 0), step(0, 7)))
	f.Add(cat(step(7, 1<<31), step(6, CQWaiting|CQWant), step(0, 3), step(7, 2), step(3, 0), step(0, 5)))
	// Requests with fields at their limits (see ringStepRequest; bits
	// 0-2 of the value pick the handle, 3-5 the address, 8-10 the
	// length, 11-13 the offset, 14-15 a rename's second length): a
	// write and a read that land, a read reaching past the region, a
	// write reaching past it, a write whose range wraps, a write past
	// the largest file, a rename whose new name reaches past the
	// region, the file grown to the largest size and cut back, an
	// unknown opcode and a handle never opened.
	f.Add(cat(step(5<<3, 0xa00), step(4<<3, 0xa00), step(4<<3, 0x318), step(5<<3, 0x610), step(3, 0),
		step(5<<3, 0x228), step(5<<3, 0x2200), step(9<<3, 0x4118), step(3, 0), step(0, 1)))
	f.Add(cat(step(7<<3, 0x2000), step(4<<3, 0x2200), step(7<<3, 0), step(15<<3, 0), step(5<<3, 0xa04),
		step(3, 0), step(1, 3)))
	ctx := context.Background()
	ph, _, err := probe.Open(ctx, "probe's", OpenCreate)
	if err != nil {
		f.Fatal(err)
	}
	probeData := []byte("the probe's own bytes")
	if _, err := probe.WriteAt(ctx, ph, probeData, 0); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, prog []byte) {
		c, err := Dial(context.Background(), d.socket, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		r := c.ring
		area := c.mapped[c.info.RingOff:]
		publish := func(q Request) {
			j := r.tail & r.mask
			q.Encode(r.sqes[j*RequestSize:])
			r.tail++
			atomic.StoreUint32(r.sqTail, r.tail)
		}
		// A file open on this connection, so that some requests find
		// their handle.
		if _, _, err := c.Open(context.Background(), "fuzzed", OpenCreate); err != nil {
			t.Fatal(err)
		}
		region := uint64(len(c.region))
		for ; len(prog) >= 5; prog = prog[5:] {
			v := le.Uint32(prog[1:])
			switch prog[0] % 8 {
			case 0: // publish requests as a client should (if there is room)
				if kind := prog[0] >> 3; kind != 0 {
					publish(ringStepRequest(uint64(r.tail)+1, kind, v, region))
					break
				}
				for range v%8 + 1 {
					publish(Request{Tag: uint64(r.tail) + 1, Op: OpNop})
				}
			case 1: // move the submission tail anywhere
				r.tail = v
				atomic.StoreUint32(r.sqTail, v)
			case 2: // move the completion head anywhere
				atomic.StoreUint32(r.cqHead, v)
			case 3: // consume every reply there is, as a client should
				r.head = atomic.LoadUint32(r.cqTail)
				atomic.StoreUint32(r.cqHead, r.head)
			case 4: // scribble on a submission entry
				atomic.StoreUint32(word(r.sqes, int(v%uint32(len(r.sqes)))&^3), v)
			case 5:
				atomic.StoreUint32(word(area, RingSQFlags), v)
			case 6:
				atomic.StoreUint32(word(area, RingCQFlags), v)
			case 7: // the replies the client's wait needs: any value
				atomic.StoreUint32(word(area, RingCQWant), v)
			}
			c.doorbell()
		}
		// Wait until the daemon has closed the connection or taken and
		// answered everything the ring shows; then consume the replies
		// and publish a marked nop after what it took: its reply
		// arrives, or the daemon closes the connection.
		last := atomic.LoadUint32(r.sqTail)
		sqHead := word(area, RingSQHead)
		awaitProgress(t, "the daemon taking and answering what was published, or closing", 1, func() int64 {
			if h := atomic.LoadUint32(sqHead); c.gone.Load() || h == last && atomic.LoadUint32(r.cqTail) == h {
				return 1
			}
			return 0
		})
		r.tail = atomic.LoadUint32(sqHead)
		r.head = atomic.LoadUint32(r.cqTail)
		atomic.StoreUint32(r.cqHead, r.head)
		const marker = 1 << 62
		publish(Request{Tag: marker, Op: OpNop})
		c.doorbell()
		seen := func() int64 {
			if c.gone.Load() {
				return 1
			}
			for t := atomic.LoadUint32(r.cqTail); r.head != t; r.head++ {
				j := r.head & r.mask
				if le.Uint64(r.cqes[j*ReplySize:]) == marker {
					return 1
				}
			}
			atomic.StoreUint32(r.cqHead, r.head)
			return 0
		}
		awaitProgress(t, "the marked nop's reply or the connection's end", 1, seen)
		if _, err := probe.Stat(context.Background(), "nothing"); !strings.Contains(err.Error(), "no such file") {
			t.Fatalf("the other client: %v", err)
		}
		got := make([]byte, len(probeData))
		_, err = probe.ReadAt(ctx, ph, got, 0)
		if errors.Is(err, fs.ErrNotExist) {
			// The program removed it by a name a listing put in its
			// region, as the protocol lets any client.
			probe.CloseFile(ctx, ph)
			if ph, _, err = probe.Open(ctx, "probe's", OpenCreate); err != nil {
				t.Fatal(err)
			}
			if _, err := probe.WriteAt(ctx, ph, probeData, 0); err != nil {
				t.Fatal(err)
			}
			return
		}
		if err != nil || !bytes.Equal(got, probeData) {
			t.Fatalf("the other client's file: %q, %v; want %q", got, err, probeData)
		}
	})
}

// ringStepRequest is the request FuzzRingSteps publishes for a step of
// the given kind (1..31) and value: the opcode from the kind (0 and
// past the last opcode included), and each field from a few bits of v
// chosen among values at and around its limits in a region of region
// bytes. Most requests fail the parser or find no file; some read and
// write the connection's file (handle 1).
func ringStepRequest(tag uint64, kind uint8, v uint32, region uint64) Request {
	pick := func(shift uint, vs ...uint64) uint64 { return vs[(v>>shift)%uint32(len(vs))] }
	q := Request{Tag: tag, Op: Op(kind % (uint8(opLimit) + 2))}
	q.Handle = uint32(pick(0, 1, 1, 0, 2, MaxHandles, MaxHandles+1, ^uint64(0)>>32))
	q.Addr = pick(3, 0, 4096, region-4096, region-1, region, ^uint64(0)-4095)
	q.Len = uint32(pick(8, 0, 1, 4096, 2, 255, 256, 64<<10+1, MaxIO+1))
	q.Off = pick(11, 0, 4096, 1<<20, engine.MaxFileSize-1, engine.MaxFileSize, ^uint64(0))
	if q.Op == OpRename {
		q.Len2 = uint32(pick(14, 1, 2, 4096, 0))
	}
	if v>>16&3 == 3 {
		q.Flags = uint8(v >> 18)
	}
	return q
}

// FuzzCheckRingLayout: a hello reply that the client accepts describes
// rings that lie inside what it maps, however hostile the daemon.
func FuzzCheckRingLayout(f *testing.F) {
	sqOff, cqOff, size := ringLayout(256)
	f.Add(uint64(1<<20), uint64(1<<20), uint64(1<<20)+size, uint32(256), sqOff, cqOff)
	f.Add(^uint64(0)-4095, ^uint64(0)-4095, ^uint64(0), uint32(8), uint32(4096), uint32(4096+8*RequestSize))
	f.Fuzz(func(t *testing.T, region, ringOff, mapSize uint64, entries, sqOff, cqOff uint32) {
		rep := HelloReply{Magic: Magic, Version: VersionRings, Region: region, RingOff: ringOff,
			MapSize: mapSize, Entries: entries, SQOff: sqOff, CQOff: cqOff}
		if checkRingLayout(&rep, HelloReplyV2Size) != nil {
			return
		}
		end := func(off uint32, n uint64) uint64 {
			e, carry := bits.Add64(ringOff, uint64(off), 0)
			e2, carry2 := bits.Add64(e, n, 0)
			if carry != 0 || carry2 != 0 {
				t.Fatalf("ring at %d+%d of %d bytes wraps", ringOff, off, n)
			}
			return e2
		}
		if end(sqOff, uint64(entries)*RequestSize) > mapSize || end(cqOff, uint64(entries)*ReplySize) > mapSize ||
			end(0, RingCQFlags+4) > mapSize || region > ringOff || mapSize > maxMapSize {
			t.Fatalf("accepted a layout outside the mapping: %+v", rep)
		}
	})
}

// FuzzClientRecv: whatever a hostile daemon writes into the completion
// ring and its tail, the client's Recv returns replies from inside the
// ring or an error.
func FuzzClientRecv(f *testing.F) {
	f.Add(uint32(0), uint32(3), []byte("replies"))
	f.Add(^uint32(0), uint32(1<<31), []byte{})
	f.Fuzz(func(t *testing.T, head, tail uint32, cqes []byte) {
		const n = 8
		area := make([]byte, RingCQFlags+64+n*ReplySize)
		r := &clientRing{entries: n, mask: n - 1,
			sqHead: word(area, RingSQHead), sqTail: word(area, RingSQTail), sqFlags: word(area, RingSQFlags),
			cqHead: word(area, RingCQHead), cqTail: word(area, RingCQTail), cqFlags: word(area, RingCQFlags),
			cqes: area[RingCQFlags+64:], head: head, tail: head}
		copy(r.cqes, cqes)
		atomic.StoreUint32(r.cqTail, tail)
		c := &Client{ring: r}
		c.canceled.Store(ctxCanceled) // an empty ring returns at once
		reps := make([]Reply, MaxBatch)
		k, err := c.Recv(reps)
		if err == nil && (k == 0 || uint32(k) > tail-head || k > n) {
			t.Fatalf("%d replies with head %d and tail %d", k, head, tail)
		}
		if err == nil && r.head != head+uint32(k) {
			t.Fatalf("head %d after %d replies from %d", r.head, k, head)
		}
	})
}

// TestRingFlagsNeverLoseAWakeup plays the handshake of the rings
// (docs/protocol.md, "Sleeping") in a shared region, round after round,
// on two threads at once, with the operations both sides use: the
// publisher stores a tail and claims the sleeper's flag (claimFlag), the
// sleeper sets the flag (setFlag) and loads the tail. In no round may
// both miss the other: the sleeper would sleep and nobody would wake it.
//
// With the flag set by an atomic store and looked at with an atomic load
// (as the client and the daemon did), this failed under -race, as CI
// runs the tests: 8 of 10 runs of 50000 rounds had rounds (3 to 413) in
// which both sides missed the other, on a loaded 2-CPU machine,
// since the race detector makes sync/atomic loads and stores on memory
// outside the Go heap plain moves, which the CPU reorders (store
// buffering). That was the lost wakeup CI hung on, a client asleep in
// the futex wait while the daemon slept on its socket. Without -race
// those operations are fenced and it did not fail.
func TestRingFlagsNeverLoseAWakeup(t *testing.T) {
	const rounds = 100000
	page := os.Getpagesize()
	fd, mem, err := newRegion((rounds*8 + page - 1) / page * page)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	defer unix.Munmap(mem)
	// Each round has a tail and a flag of its own, the tails in the
	// first half of the region and the flags in the second.
	tail := func(i int) *uint32 { return word(mem, 4*i) }
	flag := func(i int) *uint32 { return word(mem, 4*(rounds+i)) }
	var claimed, saw [rounds]bool
	var done [2]atomic.Int64 // rounds each side has played
	// Each side starts a round when the other has played the last one,
	// so that both play it at about the same time.
	start := func(me, i int) {
		for spins := 0; done[1-me].Load() < int64(i); spins++ {
			if spins%1024 == 1023 {
				runtime.Gosched() // the other side may want this CPU
			}
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { // the publisher
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for i := range rounds {
			start(0, i)
			atomic.StoreUint32(tail(i), 1)
			claimed[i] = claimFlag(flag(i), CQWaiting)
			done[0].Store(int64(i + 1))
		}
	})
	wg.Go(func() { // the sleeper
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for i := range rounds {
			start(1, i)
			setFlag(flag(i), CQWaiting)
			saw[i] = atomic.LoadUint32(tail(i)) != 0
			done[1].Store(int64(i + 1))
		}
	})
	wg.Wait()
	lost := 0
	for i := range rounds {
		if !claimed[i] && !saw[i] {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("in %d of %d rounds the sleeper missed the tail and the publisher missed the flag: lost wakeups", lost, rounds)
	}
}

// TestRingSurvivesALostWakeup: a wakeup lost either way (a bug; see
// TestRingFlagsNeverLoseAWakeup) costs a client at most ringRecheck,
// never a wait for ever on a daemon that is alive. The daemon misses a
// sleeping client's CQWaiting, or the client misses a sleeping daemon's
// SQNeedWakeup; the client's bounded futex wait (the safety net) then
// finds the reply, or rings the doorbell again. Without the safety net
// both calls waited for ever (failed after 20 s).
func TestRingSurvivesALostWakeup(t *testing.T) {
	d := newDaemon(t)
	c := dial(t, d.socket)
	r := c.ring
	old := ringRecheck
	ringRecheck = 20 * time.Millisecond
	t.Cleanup(func() { ringRecheck = old; lostWakeups.Store(0) })
	// waitFor polls a flag word until bit is set: the other side sleeps.
	waitFor := func(w *uint32, bit uint32) {
		for atomic.LoadUint32(w)&bit == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	// call fails the test if Stat does not return within a bound far
	// above ringRecheck: a client that waits for ever.
	call := func(t *testing.T) {
		t.Helper()
		done := make(chan error, 1)
		go func() {
			_, err := c.Stat(context.Background(), "missing")
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("Stat = %v, want ENOENT", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("no reply after 20 s: the client waits for ever on a live daemon")
		}
	}
	t.Run("daemon misses the client's flag", func(t *testing.T) {
		// The request waits until the client sleeps in the futex wait;
		// then the daemon's wakeup is lost.
		hook := func(q *Request, _ *Reply) {
			if q.Op == OpStat {
				waitFor(r.cqFlags, CQWaiting)
				lostWakeups.Store(1)
			}
		}
		execHook.Store(&hook)
		defer execHook.Store(nil)
		call(t)
	})
	t.Run("client misses the daemon's flag", func(t *testing.T) {
		waitFor(r.sqFlags, SQNeedWakeup) // the daemon sleeps on its socket
		lostWakeups.Store(1)             // and the doorbell is lost
		call(t)
	})
	if n := lostWakeups.Load(); n != 0 {
		t.Fatalf("%d lost wakeups left: the test lost none", n)
	}
}

// TestWakeDue: which posts wake a sleeping client. Without CQWant every
// post does; with it, only one that brings the completion tail to the
// client's want word, or leaves nothing taken unanswered. Any want
// value the client writes, however far off, is compared modulo 2^32
// and never keeps a client asleep once everything is answered.
func TestWakeDue(t *testing.T) {
	area := make([]byte, 4096)
	r := newRings(append(area, make([]byte, 8*(RequestSize+ReplySize))...), 8)
	for _, tc := range []struct {
		name        string
		flags, want uint32
		tail, taken uint32
		due         bool
	}{
		{"awake", 0, 0, 1, 5, false},
		{"awake with a want", CQWant, 9, 9, 9, false},
		{"sleeps", CQWaiting, 0, 1, 5, true},
		{"want reached", CQWaiting | CQWant, 3, 3, 5, true},
		{"want passed", CQWaiting | CQWant, 3, 4, 5, true},
		{"want not reached", CQWaiting | CQWant, 4, 3, 5, false},
		{"all answered", CQWaiting | CQWant, 9, 5, 5, true},
		{"want a ring ahead", CQWaiting | CQWant, 1 << 31, 3, 5, false},
		{"want behind, wrapping", CQWaiting | CQWant, ^uint32(0) - 1, 2, 5, true},
		{"want ahead, wrapping", CQWaiting | CQWant, 3, ^uint32(0), 7, false},
	} {
		atomic.StoreUint32(r.cqFlags, tc.flags)
		atomic.StoreUint32(r.cqWant, tc.want)
		r.tail.Store(tc.tail)
		r.taken.Store(tc.taken)
		if got := r.wakeDue(); got != tc.due {
			t.Errorf("%s: wakeDue = %v, want %v", tc.name, got, tc.due)
		}
		if got := atomic.LoadUint32(r.cqFlags); got != tc.flags {
			t.Errorf("%s: wakeDue changed the flags to %#x", tc.name, got)
		}
	}
}

// rawRing drives a connection's rings by hand, as a C client would.
type rawRing struct {
	c    *Client
	r    *clientRing
	want *uint32
}

func newRawRing(t *testing.T, socket string) *rawRing {
	c := dial(t, socket)
	return &rawRing{c: c, r: c.ring, want: word(c.mapped[c.info.RingOff:], RingCQWant)}
}

// publish puts a request on the submission ring and wakes the daemon.
func (w *rawRing) publish(t *testing.T, q Request) {
	t.Helper()
	j := w.r.tail & w.r.mask
	q.Encode(w.r.sqes[j*RequestSize:])
	w.r.tail++
	atomic.StoreUint32(w.r.sqTail, w.r.tail)
	if err := w.c.wakeDaemon(w.r); err != nil {
		t.Fatal(err)
	}
}

// sleepUntilWoken sleeps on the completion futex, as a client that set
// CQWaiting|CQWant does, until the daemon claims CQWaiting; it fails
// the test after 20 s (a client that would sleep for ever).
func (w *rawRing) sleepUntilWoken(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for atomic.LoadUint32(w.r.cqFlags)&CQWaiting != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("not woken after 20 s (completion tail %d, want %d)", atomic.LoadUint32(w.r.cqTail), atomic.LoadUint32(w.want))
		}
		futexWait(w.r.cqFlags, CQWaiting|CQWant, time.Second)
	}
}

// TestRingWantDefersWake: a client asleep for three replies (CQWant)
// is not woken by the first two, posted while the third request still
// runs, and is woken by the third. Without the want word the daemon
// woke it at the first (CQWaiting was claimed when the second was
// posted: failed before CQWant).
func TestRingWantDefersWake(t *testing.T) {
	d := newDaemon(t)
	held, release := holdOps(t, OpStat)
	w := newRawRing(t, d.socket)
	copy(w.c.mapped, "missing")
	atomic.StoreUint32(w.want, 3)
	setFlag(w.r.cqFlags, CQWaiting|CQWant)
	// The held stat goes first: were the nop taken alone and answered
	// before it, every request taken would be answered at tail 1 and the
	// all-answered rule would rightly wake the client (review rev48).
	w.publish(t, Request{Tag: 2, Op: OpStat, Len: 7}) // held in a worker
	<-held
	w.publish(t, Request{Tag: 1, Op: OpNop})
	awaitProgress(t, "the first nop's reply", 1, func() int64 { return int64(atomic.LoadUint32(w.r.cqTail)) })
	// The reader posts and decides on the wake before it takes more:
	// once the second nop is answered, the first's decision was made.
	w.publish(t, Request{Tag: 3, Op: OpNop})
	awaitProgress(t, "the second nop's reply", 2, func() int64 { return int64(atomic.LoadUint32(w.r.cqTail)) })
	if atomic.LoadUint32(w.r.cqFlags)&CQWaiting == 0 {
		t.Fatal("the daemon woke a client that waits for 3 replies after 2 of them")
	}
	release()
	w.sleepUntilWoken(t)
	if tail := atomic.LoadUint32(w.r.cqTail); tail != 3 {
		t.Fatalf("woken at completion tail %d, want 3", tail)
	}
}

// TestRingWantWakesMidPiece: a client asleep for one reply (CQWant) is
// woken by the first replies a piece of inline work posts (postMid),
// while the piece's last request still runs, not only when the piece
// ends. Sixteen nops and a held fstat, published at once, are one batch
// run by the reader. Failed before: the client slept until the fstat was
// released (the 20 s limit of sleepUntilWoken).
func TestRingWantWakesMidPiece(t *testing.T) {
	d := newDaemon(t)
	held, release := holdOps(t, OpFstat)
	w := newRawRing(t, d.socket)
	atomic.StoreUint32(w.want, 1)
	setFlag(w.r.cqFlags, CQWaiting|CQWant)
	for i := range postEvery + 1 {
		q := Request{Tag: uint64(i + 1), Op: OpNop}
		if i == postEvery {
			q.Op = OpFstat
		}
		q.Encode(w.r.sqes[(w.r.tail&w.r.mask)*RequestSize:])
		w.r.tail++
	}
	atomic.StoreUint32(w.r.sqTail, w.r.tail)
	if err := w.c.wakeDaemon(w.r); err != nil {
		t.Fatal(err)
	}
	<-held
	w.sleepUntilWoken(t)
	if tail := atomic.LoadUint32(w.r.cqTail); tail != postEvery {
		t.Fatalf("woken at completion tail %d, want %d (the fstat is held)", tail, postEvery)
	}
	release()
	awaitProgress(t, "the fstat's reply", postEvery+1, func() int64 { return int64(atomic.LoadUint32(w.r.cqTail)) })
}

// TestRingWantMoreThanComes: a client that waits for more replies than
// it has requests outstanding (a lie, or a mistake) is woken once every
// request it published is answered, not left asleep until its safety
// net (failed without the daemon's all-answered rule: no wake, 20 s).
func TestRingWantMoreThanComes(t *testing.T) {
	d := newDaemon(t)
	w := newRawRing(t, d.socket)
	atomic.StoreUint32(w.want, 5)
	setFlag(w.r.cqFlags, CQWaiting|CQWant)
	w.publish(t, Request{Tag: 1, Op: OpNop})
	w.publish(t, Request{Tag: 2, Op: OpFstat})
	w.sleepUntilWoken(t)
	awaitProgress(t, "both replies", 2, func() int64 { return int64(atomic.LoadUint32(w.r.cqTail)) })
}

// TestHelloPrefaultsTheRegion checks that the daemon touches a new
// region before it answers the hello (prefaultRegion): every page of a
// mapping up to prefaultMax, and the ring area of a larger one, exists
// in the memfd once Dial returns, though the client has touched none of
// its data part. Seen from the client's mapping with mincore(2), which
// reports whether each page of the shared file exists.
func TestHelloPrefaultsTheRegion(t *testing.T) {
	d := newDaemon(t)
	page := os.Getpagesize()
	resident := func(t *testing.T, mem []byte) int {
		t.Helper()
		vec := make([]byte, (len(mem)+page-1)/page)
		if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)),
			uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
			t.Fatal(errno)
		}
		n := 0
		for _, v := range vec {
			n += int(v & 1)
		}
		return n
	}
	for _, tc := range []struct {
		name   string
		region int
		whole  bool
	}{{"small", 1 << 20, true}, {"large", 2 * prefaultMax, false}} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Dial(context.Background(), d.socket, tc.region)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ring := c.mapped[len(c.region):]
			if got, want := resident(t, ring), len(ring)/page; got != want {
				t.Errorf("%d of the ring area's %d pages exist", got, want)
			}
			data := c.region[:len(c.region)-64<<10] // the client's name area aside
			got := resident(t, data)
			switch {
			case tc.whole && got != len(data)/page:
				t.Errorf("%d of the data part's %d pages exist, want all", got, len(data)/page)
			case !tc.whole && got != 0:
				t.Errorf("%d of the data part's %d pages exist past prefaultMax, want none", got, len(data)/page)
			}
		})
	}
}
