package server

// Probes 2, 3 and 4 of the h26a hostile-clients review, against a real
// daemon (Run on an emulated device, real io_uring) through raw requests
// of both protocol versions:
//   2. offsets and sizes at the edge of what a file may hold, and past
//      it up to 2^64 (offset+len wrapping, "negative" offsets);
//   3. handles closed, guessed, or taken from another connection;
//   4. opening "read-only": the protocol has no access modes (every
//      handle reads and writes); an open flag a client might guess for
//      one is refused, and nothing is created.
// No bug found; the tests stay for what they hold (see each).

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/zns"
)

// h26aDo sends q alone and returns its reply, within 30 s.
func h26aDo(t *testing.T, c *Client, q Request) Reply {
	t.Helper()
	q.Tag = 0x26a0000 + uint64(q.Op)
	c.setDeadline(time.Now().Add(30 * time.Second))
	defer c.setDeadline(time.Time{})
	if err := c.Submit([]Request{q}); err != nil {
		t.Fatalf("submit %v: %v", q.Op, err)
	}
	reps := make([]Reply, MaxBatch)
	n, err := c.Recv(reps)
	if err != nil || n != 1 || reps[0].Tag != q.Tag {
		t.Fatalf("%v: %d replies %+v, %v; want one with tag %#x", q.Op, n, reps[:n], err, q.Tag)
	}
	return reps[0]
}

// h26aAllocated is how many bytes the process has allocated so far.
func h26aAllocated() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

// TestH26aOffsetsAtTheEdges: writes, reads and truncates at and around
// the largest file size and up to 2^64 each get the answer the protocol
// gives (EFBIG past 2^50, the bytes within it), allocate nothing in
// proportion to the offsets, leave the file and the connection usable,
// and the sizes they made survive a restart (a checkpoint holding a size
// of 2^50 is read back).
//
// Mutants it catches: a parser that checks off+len only (2^64-1 + 1
// wraps to 0 and passes); an engine whose extent map or cache allocates
// per block up to the offset (the allocation bound); a checkpoint or
// log decoder that refuses a size of exactly MaxFileSize (the restart);
// a read that returns bytes past the end of a 2^50-byte file.
func TestH26aOffsetsAtTheEdges(t *testing.T) {
	cfg := testConfig(emuDevice(t), filepath.Join(t.TempDir(), "zf.sock"))
	d := startDaemon(t, cfg)
	for _, v := range []struct {
		name string
		dial func(testing.TB, string) *Client
	}{{"rings", dial}, {"socket framing", dialFraming}} {
		t.Run(v.name, func(t *testing.T) {
			c := v.dial(t, d.socket)
			h26aEdges(t, c, "edge-"+v.name)
		})
	}
	c := dial(t, d.socket)
	d, c = d.restart(t, cfg, c)
	ctx := context.Background()
	for _, name := range []string{"edge-rings", "edge-socket framing"} {
		st, err := c.Stat(ctx, name)
		if err != nil || st.Size != engine.MaxFileSize {
			t.Fatalf("%s after a restart: %+v, %v; want size 2^50", name, st, err)
		}
		h, _, err := c.Open(ctx, name, 0)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 8192)
		n, _ := c.ReadAt(ctx, h, got, engine.MaxFileSize-8192)
		if n != 8192 || !bytes.Equal(got[:4096], make([]byte, 4096)) || !bytes.Equal(got[4096:], h26aEdgeData()) {
			t.Fatalf("%s after a restart: the last block reads %d bytes, %q...", name, n, got[4096:4096+16])
		}
	}
	fsckAfter(t, d, cfg)
}

func h26aEdgeData() []byte { return bytes.Repeat([]byte("edge-of-2^50!..."), 256) }

func h26aEdges(t *testing.T, c *Client, name string) {
	ctx := context.Background()
	h, _, err := c.Open(ctx, name, OpenCreate|OpenTrunc)
	if err != nil {
		t.Fatal(err)
	}
	data := h26aEdgeData()
	copy(c.Data(), data)
	const maxSize = uint64(engine.MaxFileSize)
	before := h26aAllocated()
	for _, tc := range []struct {
		what string
		q    Request
		want Status
		val  uint64
	}{
		// Past the largest file, however it is spelled.
		{"write at 2^63-1", Request{Op: OpWrite, Handle: h, Off: 1<<63 - 1, Len: 4096}, StatusFileTooBig, 0},
		{"write at 2^63 (negative as int64)", Request{Op: OpWrite, Handle: h, Off: 1 << 63, Len: 4096}, StatusFileTooBig, 0},
		{"write at -4096", Request{Op: OpWrite, Handle: h, Off: ^uint64(4095), Len: 4096}, StatusFileTooBig, 0},
		{"write wrapping past 2^64", Request{Op: OpWrite, Handle: h, Off: ^uint64(0) - 100, Len: 4096}, StatusFileTooBig, 0},
		{"write ending one past 2^50", Request{Op: OpWrite, Handle: h, Off: maxSize - 4095, Len: 4096}, StatusFileTooBig, 0},
		{"read at 2^63", Request{Op: OpRead, Handle: h, Off: 1 << 63, Len: 4096}, StatusFileTooBig, 0},
		{"read wrapping past 2^64", Request{Op: OpRead, Handle: h, Off: ^uint64(0), Len: 2}, StatusFileTooBig, 0},
		{"truncate to 2^62", Request{Op: OpTruncate, Handle: h, Off: 1 << 62}, StatusFileTooBig, 0},
		{"truncate to 2^63-1", Request{Op: OpTruncate, Handle: h, Off: 1<<63 - 1}, StatusFileTooBig, 0},
		{"truncate to -1", Request{Op: OpTruncate, Handle: h, Off: ^uint64(0)}, StatusFileTooBig, 0},
		{"grow to 2^63", Request{Op: OpTruncate, Flags: TruncateGrow, Handle: h, Off: 1 << 63}, StatusFileTooBig, 0},
		{"grow to 2^50+1", Request{Op: OpTruncate, Flags: TruncateGrow, Handle: h, Off: maxSize + 1}, StatusFileTooBig, 0},
		// Nothing of those changed the file.
		{"fstat after the refusals", Request{Op: OpFstat, Handle: h}, StatusOK, 0},
		// Within it, to the last byte: a write that ends at 2^50.
		{"write ending at 2^50", Request{Op: OpWrite, Handle: h, Off: maxSize - 4096, Len: 4096}, StatusOK, 4096},
		{"fstat after it", Request{Op: OpFstat, Handle: h}, StatusOK, maxSize},
		// A read's range, too, must end within 2^50 (docs/protocol.md,
		// EFBIG), unlike pread(2), which would return the 100 bytes.
		{"read across 2^50", Request{Op: OpRead, Handle: h, Off: maxSize - 100, Addr: 16384, Len: 4096}, StatusFileTooBig, 0},
		{"read of the last 100 bytes", Request{Op: OpRead, Handle: h, Off: maxSize - 100, Addr: 16384, Len: 100}, StatusOK, 100},
		{"read at the end", Request{Op: OpRead, Handle: h, Off: maxSize, Addr: 16384, Len: 0}, StatusOK, 0},
		{"read of the hole", Request{Op: OpRead, Handle: h, Off: 1 << 49, Addr: 8192, Len: 4096}, StatusOK, 4096},
		{"fsync", Request{Op: OpFsync, Handle: h}, StatusOK, 0},
		// Shrink to nothing, grow to the largest, then write the end
		// again: sizes at the edge both ways.
		{"truncate to 0", Request{Op: OpTruncate, Handle: h}, StatusOK, 0},
		{"truncate to 2^50", Request{Op: OpTruncate, Handle: h, Off: maxSize}, StatusOK, 0},
		{"grow to 2^50 (left as it is)", Request{Op: OpTruncate, Flags: TruncateGrow, Handle: h, Off: maxSize}, StatusOK, 0},
		{"truncate to 2^50-1", Request{Op: OpTruncate, Handle: h, Off: maxSize - 1}, StatusOK, 0},
		{"grow back to 2^50", Request{Op: OpTruncate, Flags: TruncateGrow, Handle: h, Off: maxSize}, StatusOK, 0},
		{"write ending at 2^50 again", Request{Op: OpWrite, Handle: h, Off: maxSize - 4096, Len: 4096}, StatusOK, 4096},
		{"fsync again", Request{Op: OpFsync, Handle: h}, StatusOK, 0},
		{"fstat at the end", Request{Op: OpFstat, Handle: h}, StatusOK, maxSize},
	} {
		rep := h26aDo(t, c, tc.q)
		if rep.Status != tc.want || rep.Val != tc.val {
			t.Fatalf("%s: status %v (%d) val %d, want %v (%d) val %d", tc.what, rep.Status, rep.Status, rep.Val,
				tc.want, tc.want, tc.val)
		}
		if tc.q.Op == OpRead && tc.q.Off == maxSize-100 && tc.want == StatusOK && !bytes.Equal(c.Data()[16384:16384+100], data[4096-100:]) {
			t.Fatalf("%s: read %q, want the write's last 100 bytes", tc.what, c.Data()[16384:16384+100])
		}
		if tc.q.Op == OpRead && tc.q.Off == 1<<49 && !bytes.Equal(c.Data()[8192:8192+4096], make([]byte, 4096)) {
			t.Fatalf("%s: a hole reads other than zeros", tc.what)
		}
	}
	// The whole dance at 2^50 costs the daemon what a few small files
	// would: nothing in proportion to the offsets (2^38 blocks).
	if got := h26aAllocated() - before; got > 256<<20 {
		t.Fatalf("requests at 2^50 made the process allocate %d MiB", got>>20)
	}
	if st, err := c.Stat(ctx, name); err != nil || st.Size != engine.MaxFileSize {
		t.Fatalf("stat: %+v, %v; want size 2^50", st, err)
	}
	list, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list {
		if e.Name == name && e.Size != engine.MaxFileSize {
			t.Fatalf("list: %s is %d bytes, want 2^50", name, e.Size)
		}
	}
	// The connection and the daemon still serve small files.
	small, _, err := c.Open(ctx, name+"-small", OpenCreate|OpenTrunc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteAt(ctx, small, []byte("still fine"), 0); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 10)
	if n, err := c.ReadAt(ctx, small, got, 0); n != 10 || string(got) != "still fine" {
		t.Fatalf("a small file after the edges: %q, %v", got[:n], err)
	}
}

// fsckAfter stops d and checks its device.
func fsckAfter(t *testing.T, d *daemon, cfg RunConfig) {
	t.Helper()
	if err := d.stop(t); err != nil {
		t.Fatal(err)
	}
	dev, err := zns.Open(cfg.Device, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	rep, err := engine.Fsck(dev)
	if err != nil || len(rep.Problems) > 0 {
		t.Fatalf("fsck: %q, %v", rep.Problems, err)
	}
}

// TestH26aHandlesAreTheConnections: a handle number means a file only on
// the connection that opened it. Another connection's numbers, numbers
// never handed out, a handle closed (also closed twice, or closed while
// its writes are queued behind it) all get EBADF and touch no file; a
// number reused after a close means the new file.
//
// Mutants it catches: a handle table shared by connections (B's use of
// A's number would write A's file); a close that leaves the entry's file
// in place (the write after the close would land); a close that frees
// the number twice (two opens would get the same number, and one's
// writes land in the other's file).
func TestH26aHandlesAreTheConnections(t *testing.T) {
	d := newDaemon(t)
	ctx := context.Background()
	a, b := dial(t, d.socket), dialFraming(t, d.socket)
	// A holds three files, B one: A's last number is one B never had.
	for _, pad := range []string{"a-pad1", "a-pad2"} {
		if _, _, err := a.Open(ctx, pad, OpenCreate); err != nil {
			t.Fatal(err)
		}
	}
	ha, _, err := a.Open(ctx, "a-file", OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.WriteAt(ctx, ha, []byte("A's bytes"), 0); err != nil {
		t.Fatal(err)
	}
	hb, _, err := b.Open(ctx, "b-file", OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	if hb == ha {
		t.Fatalf("B's first handle is %d, A's third", hb)
	}
	// B guesses A's numbers and a few more (not its own).
	copy(b.Data(), "B's guess")
	for _, guess := range []uint32{ha, ha + 1, 2, 3, 64, 65, MaxHandles, MaxHandles + 1, 1 << 31, ^uint32(0)} {
		for _, op := range []Op{OpWrite, OpRead, OpFsync, OpTruncate, OpFstat, OpClose} {
			q := Request{Op: op, Handle: guess}
			if op == OpWrite || op == OpRead {
				q.Len = 9
			}
			rep := h26aDo(t, b, q)
			if guess == hb {
				continue
			}
			if rep.Status != StatusBadHandle {
				t.Fatalf("B's %v on handle %d (A has %d open): %v, want EBADF", op, guess, ha, rep.Status)
			}
		}
	}
	// A's file is A's.
	got := make([]byte, 32)
	n, _ := a.ReadAt(ctx, ha, got, 0)
	if string(got[:n]) != "A's bytes" {
		t.Fatalf("A's file after B's guesses: %q", got[:n])
	}
	// A closes; the number is dead on A too, also for a second close.
	if err := a.CloseFile(ctx, ha); err != nil {
		t.Fatal(err)
	}
	copy(a.Data(), "after close")
	for _, op := range []Op{OpWrite, OpRead, OpFsync, OpTruncate, OpFstat, OpClose} {
		q := Request{Op: op, Handle: ha}
		if op == OpWrite || op == OpRead {
			q.Len = 11
		}
		if rep := h26aDo(t, a, q); rep.Status != StatusBadHandle {
			t.Fatalf("%v on a closed handle: %v, want EBADF", op, rep.Status)
		}
	}
	// A close queued in one batch ahead of writes on the same handle:
	// each write either ran before the close or is refused, never lands
	// after it in some other file.
	h1, _, err := a.Open(ctx, "a-one", OpenCreate|OpenTrunc)
	if err != nil {
		t.Fatal(err)
	}
	batch := []Request{{Tag: 1, Op: OpClose, Handle: h1}}
	for i := range 8 {
		batch = append(batch, Request{Tag: uint64(2 + i), Op: OpWrite, Handle: h1, Off: uint64(i) * 11, Len: 11})
	}
	a.setDeadline(time.Now().Add(30 * time.Second))
	if err := a.Submit(batch); err != nil {
		t.Fatal(err)
	}
	reps := make([]Reply, MaxBatch)
	for seen := 0; seen < len(batch); {
		k, err := a.Recv(reps)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range reps[:k] {
			if r.Tag == 1 && r.Status != StatusOK {
				t.Fatalf("close: %v", r.Status)
			}
			if r.Tag > 1 && r.Status != StatusOK && r.Status != StatusBadHandle {
				t.Fatalf("a write racing its handle's close: %v, want done or EBADF", r.Status)
			}
		}
		seen += k
	}
	a.setDeadline(time.Time{})
	// Reuse: the numbers freed come back, each for one open only, and
	// each means its new file.
	h2, _, err := a.Open(ctx, "a-two", OpenCreate|OpenTrunc)
	if err != nil {
		t.Fatal(err)
	}
	h3, _, err := a.Open(ctx, "a-three", OpenCreate|OpenTrunc)
	if err != nil {
		t.Fatal(err)
	}
	if h2 == h3 {
		t.Fatalf("two open files share handle %d", h2)
	}
	if _, err := a.WriteAt(ctx, h2, []byte("two"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := a.WriteAt(ctx, h3, []byte("three"), 0); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"a-file": "A's bytes", "a-two": "two", "a-three": "three", "b-file": ""} {
		st, err := a.Stat(ctx, name)
		if err != nil || st.Size != int64(len(want)) {
			t.Fatalf("%s: %+v, %v; want %d bytes", name, st, err, len(want))
		}
	}
	if st, _ := b.Stat(ctx, "b-file"); st.Size != 0 {
		t.Fatalf("b-file grew to %d", st.Size)
	}
}

// TestH26aNoReadOnlyHandles: the protocol has no access modes. A client
// that guesses an open flag for "read-only" (any bit past the four
// defined) gets EINVAL, and the open neither creates nor truncates;
// every handle may write, fsync and truncate (there is no read-only
// handle to refuse them).
//
// Mutant it catches: a parser that ignores unknown open flags (the open
// with 0x10|create would create the file, and with 0x10|trunc empty it).
func TestH26aNoReadOnlyHandles(t *testing.T) {
	d := newDaemon(t)
	bothVersions(t, d.socket, func(t *testing.T, c *Client) {
		ctx := context.Background()
		name := "ro-" + map[bool]string{true: "rings", false: "framing"}[c.ring != nil]
		h, _, err := c.Open(ctx, name, OpenCreate|OpenTrunc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.WriteAt(ctx, h, []byte("kept"), 0); err != nil {
			t.Fatal(err)
		}
		if err := c.Fsync(ctx, h); err != nil {
			t.Fatal(err)
		}
		copy(c.Data(), name+"-new")
		for _, bit := range []uint8{0x10, 0x20, 0x40, 0x80} {
			for _, q := range []Request{
				{Op: OpOpen, Flags: bit | OpenCreate, Len: uint32(len(name) + 4)},
				{Op: OpOpen, Flags: bit | OpenTrunc, Len: uint32(len(name))},
			} {
				if rep := h26aDo(t, c, q); rep.Status != StatusInvalid {
					t.Fatalf("open with flag %#x: %v, want EINVAL", q.Flags, rep.Status)
				}
				copy(c.Data(), name)
			}
			copy(c.Data(), name+"-new")
		}
		if _, err := c.Stat(ctx, name+"-new"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("an open refused for its flags created the file: %v", err)
		}
		if st, err := c.Stat(ctx, name); err != nil || st.Size != 4 {
			t.Fatalf("an open refused for its flags truncated the file: %+v, %v", st, err)
		}
		// Every handle writes, truncates and fsyncs.
		h2, _, err := c.Open(ctx, name, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.WriteAt(ctx, h2, []byte("!"), 4); err != nil {
			t.Fatal(err)
		}
		if err := c.Truncate(ctx, h2, 3); err != nil {
			t.Fatal(err)
		}
		if err := c.Fsync(ctx, h2); err != nil {
			t.Fatal(err)
		}
	})
}
