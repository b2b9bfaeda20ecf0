package pebblefs

import (
	"errors"
	"io/fs"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/uring"
	"github.com/zonefold/zonefold/zns"
)

// openFrozen formats an emulated device of zones zones of zoneSize and
// opens the engine on it with cfg through a frozenDevice, for tests that
// cut its power: the device's name, the device, the wrapper to freeze
// and the engine.
func openFrozen(t *testing.T, zones int, zoneSize string, cfg engine.Config) (string, zns.Device, *frozenDevice, *engine.Engine) {
	t.Helper()
	name := emuDevice(t, zones, zoneSize)
	dev, err := zns.Open(name, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := engine.Format(dev, engine.FormatOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	fd := &frozenDevice{Device: dev}
	e, err := engine.OpenDevice(fd, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return name, dev, fd, e
}

// powerCutReopen cuts the power of dev, which the engine e uses through
// fd (frozen first: the closing engine writes nothing more), closes e
// and opens the device named name again with cfg, through a new
// frozenDevice: the state a power cut leaves.
func powerCutReopen(t *testing.T, name string, cfg engine.Config, dev zns.Device, fd *frozenDevice, e *engine.Engine) (zns.Device, *frozenDevice, *engine.Engine) {
	t.Helper()
	fd.frozen.Store(true)
	if err := dev.(*zns.Emu).PowerCut(); err != nil {
		t.Fatal(err)
	}
	_ = e.Close() // closes dev, which keeps the cut's state
	dev, err := zns.Open(name, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fd = &frozenDevice{Device: dev}
	if e, err = engine.OpenDevice(fd, cfg); err != nil {
		t.Fatalf("reopen after the cut: %v", err)
	}
	return dev, fd, e
}

// frozenDevice refuses every change once frozen: the power is off.
type frozenDevice struct {
	zns.Device
	frozen atomic.Bool
}

func (d *frozenDevice) check() error {
	if d.frozen.Load() {
		return syscall.EIO
	}
	return nil
}

func (d *frozenDevice) Append(zone int, bufs [][]byte, c zns.AppendCompletion) error {
	if err := d.check(); err != nil {
		return err
	}
	return d.Device.Append(zone, bufs, c)
}

func (d *frozenDevice) Write(zone int, off int64, bufs [][]byte, c uring.Completion) error {
	if err := d.check(); err != nil {
		return err
	}
	return d.Device.Write(zone, off, bufs, c)
}

func (d *frozenDevice) Flush() error {
	if err := d.check(); err != nil {
		return err
	}
	return d.Device.Flush()
}

func (d *frozenDevice) ResetZone(zone int) error {
	if err := d.check(); err != nil {
		return err
	}
	return d.Device.ResetZone(zone)
}

func (d *frozenDevice) FinishZone(zone int) error {
	if err := d.check(); err != nil {
		return err
	}
	return d.Device.FinishZone(zone)
}

// TestDeferredNamespaceDurability checks what pebblefs promises for the
// creates and removes it logs without a device flush (the package doc),
// across power cuts of the emulated device: a file is durable from its
// own Sync; a remove and an empty created file from the directory's
// Sync, or any file's; a rename at once. Unsynced, either may be lost,
// but a remove never leaves a file half there.
func TestDeferredNamespaceDurability(t *testing.T) {
	name, dev, fd, e := openFrozen(t, 16, "1M", testConfig())
	y := New(e)
	cut := func() {
		t.Helper()
		dev, fd, e = powerCutReopen(t, name, testConfig(), dev, fd, e)
		y = New(e)
	}
	write := func(name, data string, sync bool) {
		t.Helper()
		f, err := y.Create(name, vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte(data)); err != nil {
			t.Fatal(err)
		}
		if sync {
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	check := func(name, want string) {
		t.Helper()
		f, err := y.Open(name)
		if want == "" {
			if err == nil || !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("%s: want it gone, got %v", name, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		defer f.Close()
		b := make([]byte, len(want)+1)
		n, _ := f.ReadAt(b, 0)
		if string(b[:n]) != want {
			t.Fatalf("%s: read %q, want %q", name, b[:n], want)
		}
	}
	if err := y.MkdirAll("db", 0o755); err != nil {
		t.Fatal(err)
	}

	// A file synced survives: its Sync covers its creation.
	write("db/a", "alpha", true)
	cut()
	check("db/a", "alpha")

	// An empty file and a remove survive the directory's Sync.
	write("db/empty", "", false)
	if err := y.Remove("db/a"); err != nil {
		t.Fatal(err)
	}
	d, err := y.OpenDir("db")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	cut()
	check("db/a", "")
	if _, err := y.Stat("db/empty"); err != nil {
		t.Fatalf("created and the directory synced: %v", err)
	}

	// A remove is durable from another file's Sync too.
	write("db/b", "beta", true)
	if err := y.Remove("db/b"); err != nil {
		t.Fatal(err)
	}
	write("db/c", "gamma", true)
	cut()
	check("db/b", "")
	check("db/c", "gamma")

	// Unsynced, a remove may be lost: the file comes back whole.
	if err := y.Remove("db/c"); err != nil {
		t.Fatal(err)
	}
	cut()
	if _, err := y.Stat("db/c"); err == nil {
		check("db/c", "gamma")
	}

	// A rename is durable when it returns, and takes the removes and
	// creates before it along.
	write("db/d", "delta", true)
	if err := y.Remove("db/d"); err != nil {
		t.Fatal(err)
	}
	write("db/e", "", false)
	write("db/f", "phi", true)
	if err := y.Rename("db/f", "db/g"); err != nil {
		t.Fatal(err)
	}
	cut()
	check("db/d", "")
	check("db/g", "phi")
	if _, err := y.Stat("db/e"); err != nil {
		t.Fatalf("created before a rename: %v", err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}
