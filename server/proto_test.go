package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zonefold/zonefold/engine"
)

func TestRequestRoundTrip(t *testing.T) {
	tests := []Request{
		{Tag: 1, Op: OpNop},
		{Tag: ^uint64(0), Op: OpWrite, Handle: 7, Off: 1 << 40, Addr: 4096, Len: MaxIO},
		{Tag: 3, Op: OpOpen, Flags: OpenCreate | OpenTrunc, Addr: 10, Len: engine.MaxNameLen},
		{Tag: 4, Op: OpRename, Addr: 0, Len: 3, Len2: 5},
		{Tag: 5, Op: OpTruncate, Handle: 1, Off: engine.MaxFileSize},
		{Tag: 6, Op: OpList, Flags: ListAfter, Off: engine.MaxNameLen, Addr: 8, Len: 64 << 10},
	}
	for _, want := range tests {
		b := make([]byte, RequestSize)
		want.Encode(b)
		got, st := ParseRequest(b, 1<<30)
		if st != StatusOK || got != want {
			t.Errorf("round trip of %+v: %+v, %v", want, got, st)
		}
	}
}

// TestListCursorBounds: a list cursor longer than a name or than the
// range that holds it is refused.
func TestListCursorBounds(t *testing.T) {
	for _, tc := range []struct {
		off  uint64
		len  uint32
		want Status
	}{
		{0, 4096, StatusOK},
		{engine.MaxNameLen, engine.MaxNameLen, StatusOK},
		{engine.MaxNameLen + 1, 4096, StatusInvalid},
		{10, 9, StatusInvalid},
	} {
		b := make([]byte, RequestSize)
		q := Request{Tag: 1, Op: OpList, Flags: ListAfter, Off: tc.off, Len: tc.len}
		q.Encode(b)
		if _, st := ParseRequest(b, 1<<20); st != tc.want {
			t.Errorf("list cursor of %d bytes in %d: %v, want %v", tc.off, tc.len, st, tc.want)
		}
	}
}

func TestStatusOf(t *testing.T) {
	tests := []struct {
		err  error
		want Status
	}{
		{nil, StatusOK},
		{io.EOF, StatusOK},
		{fmt.Errorf("x: %w", fs.ErrNotExist), StatusNotExist},
		{fmt.Errorf("x: %w", fs.ErrExist), StatusExist},
		{engine.ErrNoSpace, StatusNoSpace},
		{fmt.Errorf("x: %w", fs.ErrClosed), StatusShutdown},
		{fmt.Errorf("x: %w", fs.ErrInvalid), StatusInvalid},
		{fmt.Errorf("wrapped: %w", StatusTooBig), StatusTooBig},
		{errors.New("device on fire"), StatusIO},
		// A device error joined to another one (a short write's
		// ENOSPC or shutdown, then its size record failing) is the
		// client's to know: the file may not be as the other says.
		{errors.Join(fmt.Errorf("write: %w", engine.ErrNoSpace), fmt.Errorf("log size: %w", syscall.EIO)), StatusIO},
		{errors.Join(fmt.Errorf("write: %w", engine.ErrClosed), fmt.Errorf("log size: %w", syscall.EIO)), StatusIO},
	}
	for _, tc := range tests {
		if got := statusOf(tc.err); got != tc.want {
			t.Errorf("statusOf(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if !errors.Is(StatusNotExist, fs.ErrNotExist) || !errors.Is(StatusNoSpace, syscall.ENOSPC) || errors.Is(StatusIO, fs.ErrNotExist) {
		t.Error("Status does not match the errors it stands for")
	}
}

// FuzzParseRequest: the parser never panics, and what it accepts is safe
// to execute: the region range is inside the region, lengths and offsets
// are within the limits, and the header survives a round trip.
func FuzzParseRequest(f *testing.F) {
	for _, q := range []Request{
		{Tag: 1, Op: OpRead, Handle: 1, Off: 4096, Addr: 0, Len: 4096},
		{Tag: 2, Op: OpRename, Addr: 100, Len: 3, Len2: 4},
		{Tag: 3, Op: OpOpen, Flags: OpenCreate, Len: 1},
		{Tag: 4, Op: OpList, Flags: ListAfter, Off: 3, Addr: 0, Len: 4096},
	} {
		b := make([]byte, RequestSize)
		q.Encode(b)
		f.Add(b, uint64(1<<20))
	}
	f.Add(make([]byte, RequestSize-1), uint64(0))
	f.Fuzz(func(t *testing.T, b []byte, region uint64) {
		q, st := ParseRequest(b, region)
		if st != StatusOK {
			return
		}
		end := q.Addr + uint64(q.Len) + uint64(q.Len2)
		if end < q.Addr || end > region {
			t.Fatalf("accepted a range outside the region: %+v in %d", q, region)
		}
		if (q.Op == OpRead || q.Op == OpWrite) && (q.Len > MaxIO || q.Off+uint64(q.Len) > engine.MaxFileSize) {
			t.Fatalf("accepted an I/O out of bounds: %+v", q)
		}
		if q.Op == 0 || q.Op >= opLimit {
			t.Fatalf("accepted opcode %d", q.Op)
		}
		if q.Op == OpList && q.Flags&ListAfter != 0 && (q.Off > engine.MaxNameLen || q.Off > uint64(q.Len)) {
			t.Fatalf("accepted a list cursor outside its range or above the name limit: %+v", q)
		}
		out := make([]byte, RequestSize)
		q.Encode(out)
		if !bytes.Equal(out, b) {
			t.Fatalf("round trip changed the header:\n%x\n%x", b, out)
		}
	})
}

func FuzzParseHello(f *testing.F) {
	b := make([]byte, HelloSize)
	(&Hello{Magic: Magic, Version: VersionFraming, Region: 1 << 20}).Encode(b)
	f.Add(b)
	b2 := make([]byte, HelloRingsSize)
	(&Hello{Magic: Magic, Version: VersionRings, Region: 1 << 20, Entries: 64}).Encode(b2)
	f.Add(b2)
	f.Fuzz(func(t *testing.T, b []byte) {
		h, st, err := ParseHello(b)
		if (st == StatusOK) != (err == nil) {
			t.Fatalf("status %v with error %v", st, err)
		}
		if st == StatusOK && (h.Magic != Magic || (h.Version != VersionFraming && h.Version != VersionRings) ||
			len(b) != helloSize(h.Version) || h.Region > MaxRegion || h.Entries > MaxRingEntries) {
			t.Fatalf("accepted %+v", h)
		}
	})
}

func FuzzParseReply(f *testing.F) {
	b := make([]byte, ReplySize)
	(&Reply{Tag: 9, Status: StatusBadHandle, Val: 1, Val2: 2}).Encode(b)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseReply(b)
		if err != nil {
			return
		}
		out := make([]byte, ReplySize)
		r.Encode(out)
		if le.Uint32(b[12:]) == 0 && !bytes.Equal(out, b) {
			t.Fatalf("round trip changed the reply:\n%x\n%x", b, out)
		}
	})
}

// FuzzParseHelloReply: the client's side of the handshake takes only a
// reply of either size with the magic, and what it takes encodes back
// to the same bytes (reserved fields aside).
func FuzzParseHelloReply(f *testing.F) {
	for _, r := range []HelloReply{
		{Magic: Magic, Version: VersionFraming, MaxBatch: 64, Region: 1 << 20, MaxInflight: 256, MaxIO: 1 << 20},
		{Magic: Magic, Version: VersionRings, Status: StatusOK, MaxBatch: 64, Region: 1 << 20, MaxInflight: 256,
			MaxIO: 1 << 20, RingOff: 1 << 20, MapSize: 2 << 20, Entries: 64, SQOff: 64, CQOff: 4096},
	} {
		b := make([]byte, r.size())
		r.Encode(b)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseHelloReply(b)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		if r.Magic != Magic || (len(b) != HelloReplySize && len(b) != HelloReplyV2Size) {
			t.Fatalf("accepted %d bytes as %+v", len(b), r)
		}
		out := make([]byte, len(b))
		r.Encode(out)
		in := bytes.Clone(b)
		clear(in[6:8])
		if len(in) == HelloReplyV2Size {
			clear(in[60:64])
		}
		if !bytes.Equal(out, in) {
			t.Fatalf("round trip changed the hello reply:\n%x\n%x", in, out)
		}
	})
}

func FuzzParseList(f *testing.F) {
	b, _ := appendListEntry(nil, 100, 42, "name")
	b, _ = appendListEntry(b, 100, 7, "other")
	f.Add(b, 2)
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		if n < 0 || n > 1000 {
			return
		}
		list, err := ParseList(b, n)
		if err == nil && len(list) != n {
			t.Fatalf("%d entries, want %d", len(list), n)
		}
	})
}

// FuzzSession sends one arbitrary message to a live daemon after a
// valid hello. A whole batch of requests gets exactly one reply per
// request, matched by tag; anything else closes the connection. Either
// way the daemon keeps serving another client.
func FuzzSession(f *testing.F) {
	d := startDaemon(f, testConfig(emuDevice(f), filepath.Join(f.TempDir(), "zf.sock")))
	probe := dial(f, d.socket)
	seed := make([]byte, 3*RequestSize)
	(&Request{Tag: 1, Op: OpNop}).Encode(seed)
	(&Request{Tag: 2, Op: OpStats, Len: 1 << 16}).Encode(seed[RequestSize:])
	(&Request{Tag: 3, Op: OpRead, Handle: 5, Len: 10}).Encode(seed[2*RequestSize:])
	f.Add(seed)
	f.Add([]byte("not a request"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		if len(msg) == 0 {
			return // an empty message is end of stream
		}
		c, err := DialSocketFraming(context.Background(), d.socket, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.uc.SetDeadline(time.Now().Add(time.Minute))
		if _, err := c.uc.Write(msg); err != nil {
			t.Fatal(err)
		}
		framed := len(msg)%RequestSize == 0 && len(msg) <= MaxBatch*RequestSize
		want := map[uint64]int{}
		if framed {
			for i := 0; i < len(msg); i += RequestSize {
				want[le.Uint64(msg[i:])]++
			}
		}
		reps := make([]Reply, MaxBatch)
		for left := len(want); ; {
			if framed && left == 0 {
				break
			}
			n, err := c.Recv(reps)
			if err != nil {
				if framed {
					t.Fatalf("a batch of %d requests: %v", len(msg)/RequestSize, err)
				}
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatal("a broken message did not close the connection")
				}
				break
			}
			if !framed {
				t.Fatalf("replies to a message of %d bytes", len(msg))
			}
			for _, r := range reps[:n] {
				if want[r.Tag]--; want[r.Tag] < 0 {
					t.Fatalf("reply to tag %d that was not asked for", r.Tag)
				}
				left--
			}
		}
		if _, err := probe.Stat(context.Background(), "nothing"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("the other client: %v", err)
		}
	})
}

// A request canceled while the device failed under it is answered EIO,
// not "canceled": a write canceled mid-way whose size record then failed
// (File.keepSize) may have left the file other than the reply says.
//
// Before, the cancellation hid the device error (StatusCanceled).
func TestStatusDeviceErrorBeatsCancellation(t *testing.T) {
	c := &conn{s: &Server{}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	err := errors.Join(fmt.Errorf("write: %w", context.Canceled), fmt.Errorf("log size: %w", syscall.EIO))
	if st := c.status(err); st != StatusIO {
		t.Fatalf("status(%v) = %v, want %v", err, st, StatusIO)
	}
	if st := c.status(fmt.Errorf("write: %w", context.Canceled)); st != StatusCanceled {
		t.Fatalf("a plain cancellation: %v, want %v", st, StatusCanceled)
	}
}
