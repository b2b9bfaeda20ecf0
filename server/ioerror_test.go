package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/zns"
)

// TestWritebackEIOReachesTheClient: a write the daemon acknowledged
// (into its cache) whose append fails at writeback makes the file's next
// fsync fail with EIO at the client; another file's data is untouched,
// the daemon goes on serving, the next fsync rewrites the data and
// succeeds, and everything synced survives a reopen.
func TestWritebackEIOReachesTheClient(t *testing.T) {
	devName := fmt.Sprintf("emu:%s?zone_size=1M&zones=24", filepath.Join(t.TempDir(), "dev"))
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := engine.Format(dev, engine.FormatOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := engine.Config{CacheBytes: 8 << 20, DirtyLimit: 4 << 20}
	e, err := engine.OpenDevice(dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(t.TempDir(), "zf.sock")
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: socket, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	srv := New(e, Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, l) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-served; err != nil {
				t.Errorf("serve: %v", err)
			}
		}
	}
	defer stop()

	c := dial(t, socket)
	defer c.Close()
	bg := context.Background()
	open := func(name string) uint32 {
		h, _, err := c.Open(bg, name, OpenCreate)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	write := func(h uint32, p []byte) {
		if n, err := c.WriteAt(bg, h, p, 0); n != len(p) || err != nil {
			t.Fatalf("write: %d of %d, %v", n, len(p), err)
		}
	}
	wantA := bytes.Repeat([]byte("eio at writeback "), 8000)
	wantB := bytes.Repeat([]byte("bystander "), 9000)
	a, b := open("a"), open("b")
	write(b, wantB)
	if err := c.Fsync(bg, b); err != nil {
		t.Fatal(err)
	}
	write(a, wantA)
	dev.(*zns.Emu).FailWrite(1)
	err = c.Fsync(bg, a)
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("fsync over a failed append: %v, want EIO", err)
	}
	// The daemon still serves, and the data is as written.
	for _, f := range []struct {
		h    uint32
		want []byte
	}{{a, wantA}, {b, wantB}} {
		got := make([]byte, len(f.want))
		if n, err := c.ReadAt(bg, f.h, got, 0); n != len(got) || (err != nil && err != io.EOF) || !bytes.Equal(got, f.want) {
			t.Fatalf("read after EIO: %d, %v, equal %v", n, err, bytes.Equal(got, f.want))
		}
	}
	// The error was reported; the data stayed dirty and goes now.
	if err := c.Fsync(bg, a); err != nil {
		t.Fatalf("fsync after the EIO was reported: %v", err)
	}
	if st, err := c.Stats(bg); err != nil || st.AppendErrs != 1 {
		t.Fatalf("stats: append errors %d, %v; want 1", st.AppendErrs, err)
	}
	c.Close()
	stop()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e, err = engine.Open(devName, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for name, want := range map[string][]byte{"a": wantA, "b": wantB} {
		f, err := e.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, f.Size())
		if n, err := f.ReadAt(got, 0); n != len(got) || (err != nil && err != io.EOF) || !bytes.Equal(got, want) {
			t.Fatalf("%s after reopen: %d bytes, equal %v", name, len(got), bytes.Equal(got, want))
		}
	}
}
