package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// emuDevice is an emulated zoned device string in a test's temp dir.
func emuDevice(t testing.TB, zones int, zoneSize string, extra string) string {
	t.Helper()
	return fmt.Sprintf("emu:%s?zone_size=%s&zones=%d%s", filepath.Join(t.TempDir(), "dev"), zoneSize, zones, extra)
}

// formatOpenThrough formats devName, an emu device, and opens an engine
// on it through the device wrap returns (a test's fault-injecting
// wrapper of the emu).
func formatOpenThrough(t testing.TB, devName string, cfg Config, wrap func(*zns.Emu) zns.Device) *Engine {
	t.Helper()
	return formatOpenWith(t, devName, cfg, func(dev zns.Device) zns.Device { return wrap(dev.(*zns.Emu)) })
}

// formatOpen formats dev and opens an engine on it.
func formatOpen(t testing.TB, devName string, cfg Config) *Engine {
	t.Helper()
	return formatOpenWith(t, devName, cfg, func(dev zns.Device) zns.Device { return dev })
}

func formatOpenWith(t testing.TB, devName string, cfg Config, wrap func(zns.Device) zns.Device) *Engine {
	t.Helper()
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatalf("open device: %v", err)
	}
	if _, err := Format(dev, FormatOptions{}); err != nil {
		t.Fatalf("format: %v", err)
	}
	e, err := OpenDevice(wrap(dev), cfg)
	if err != nil {
		t.Fatalf("open engine: %v", err)
	}
	return e
}

func reopen(t testing.TB, devName string, cfg Config) *Engine {
	t.Helper()
	e, err := Open(devName, cfg)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	return e
}

// mustCreate creates the file name on e or fails the test.
func mustCreate(t testing.TB, e *Engine, name string) *File {
	t.Helper()
	f, err := e.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func smallConfig() Config {
	return Config{CacheBytes: 8 << 20, DirtyLimit: 4 << 20}
}

func TestWriteReadSyncReopen(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	e := formatOpen(t, devName, smallConfig())
	f, err := e.Create("a")
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte("zonefold"), 40000) // 320000 bytes: not block aligned
	if n, err := f.WriteAt(want, 1000); err != nil || n != len(want) {
		t.Fatalf("WriteAt = %d, %v", n, err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want)+2000)
	n, err := f.ReadAt(got, 0)
	if err != io.EOF || n != len(want)+1000 {
		t.Fatalf("ReadAt = %d, %v; want %d, EOF", n, err, len(want)+1000)
	}
	if !bytes.Equal(got[:1000], make([]byte, 1000)) || !bytes.Equal(got[1000:n], want) {
		t.Fatal("read differs from write")
	}
	st := e.Stats()
	if st.DevData < int64(len(want)) || st.Appends == 0 {
		t.Fatalf("nothing reached the device: %+v", st)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	e = reopen(t, devName, smallConfig())
	defer e.Close()
	f, err = e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	clear(got)
	n, err = f.ReadAt(got, 0)
	if n != len(want)+1000 || !bytes.Equal(got[1000:n], want) {
		t.Fatalf("after reopen: read %d bytes (%v), content equal: %v", n, err, bytes.Equal(got[1000:n], want))
	}
	if _, err := e.Open("missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open(missing) = %v, want ErrNotExist", err)
	}
}

func TestOpenRefusesUnformatted(t *testing.T) {
	devName := emuDevice(t, 8, "1M", "")
	if _, err := Open(devName, smallConfig()); !errors.Is(err, ErrNotFormatted) {
		t.Fatalf("Open of a blank device = %v, want ErrNotFormatted", err)
	}
	e := formatOpen(t, devName, smallConfig())
	f, _ := e.Create("x")
	f.WriteAt([]byte("data"), 0)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if _, err := Format(dev, FormatOptions{}); err == nil {
		t.Fatal("Format without Force erased a device holding data")
	}
}

func TestOpenFileFlags(t *testing.T) {
	e := formatOpen(t, emuDevice(t, 8, "1M", ""), smallConfig())
	defer e.Close()
	f, err := e.OpenFile("x", OCreate|OExcl)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("keep"), 0)
	if _, err := e.OpenFile("x", OCreate|OExcl); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("exclusive create of an existing file: %v, want ErrExist", err)
	}
	g, err := e.OpenFile("x", OCreate)
	if err != nil || g.Size() != 4 {
		t.Fatalf("plain create of an existing file: %v, size %d (want it kept)", err, g.Size())
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); !errors.Is(err, fs.ErrClosed) {
		t.Fatalf("second Close: %v, want ErrClosed", err)
	}
	if _, err := g.WriteAt([]byte("x"), 0); !errors.Is(err, fs.ErrClosed) {
		t.Fatalf("write on a closed handle: %v", err)
	}
	if h, _ := e.OpenFile("x", OTrunc); h.Size() != 0 {
		t.Fatalf("OTrunc left %d bytes", h.Size())
	}
}

func TestReformatForgetsTheOldFileSystem(t *testing.T) {
	devName := emuDevice(t, 12, "1M", "")
	for round := range 3 {
		e := formatOrForce(t, devName, round > 0)
		if n := len(e.List()); n != 0 {
			t.Fatalf("round %d: a fresh format lists %d files of an earlier one", round, n)
		}
		for i := range 5 + round {
			f, _ := e.Create(fmt.Sprintf("r%d.%d", round, i))
			f.WriteAt(bytes.Repeat([]byte{byte(round)}, 50000), 0)
		}
		// Several checkpoints, so both metadata zones hold records.
		for range 3 {
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			e = reopen(t, devName, smallConfig())
		}
		if n := len(e.List()); n != 5+round {
			t.Fatalf("round %d: %d files, want %d", round, n, 5+round)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		e = reopen(t, devName, smallConfig())
		if n := len(e.List()); n != 5+round {
			t.Fatalf("round %d after reopen: %d files, want %d", round, n, 5+round)
		}
		e.Close()
	}
}

func formatOrForce(t *testing.T, devName string, force bool) *Engine {
	t.Helper()
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Format(dev, FormatOptions{Force: force}); err != nil {
		t.Fatal(err)
	}
	dev.Close()
	return reopen(t, devName, smallConfig())
}
