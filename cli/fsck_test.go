package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/server"
	"github.com/zonefold/zonefold/zns"
)

func TestFormatWriteFsck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev")
	devName := fmt.Sprintf("emu:%s?zone_size=1M&zones=16", path)
	run := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := Main(args, &out, &errOut)
		return code, out.String() + errOut.String()
	}
	if code, out := run("format", devName); code != 0 || !strings.Contains(out, "formatted") {
		t.Fatalf("format: %d %s", code, out)
	}
	e, err := engine.Open(devName, engine.Config{CacheBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := e.Create("hello")
	f.WriteAt(bytes.Repeat([]byte("hello zones "), 10000), 0)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	code, out := run("fsck", devName)
	if code != 0 || !strings.Contains(out, "1 file,") || !strings.Contains(out, "clean") {
		t.Fatalf("fsck of a clean device: exit %d\n%s", code, out)
	}
	if code, out := run("format", devName); code == 0 {
		t.Fatalf("format of a device holding data succeeded:\n%s", out)
	}

	// Damage the data of the first record behind the device's back.
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	emu := dev.(*zns.Emu)
	g := dev.Geometry()
	at := emu.FileOffset(2*g.ZoneSize + engine.BlockSize + 100) // zone 2: the first data zone
	dev.Close()
	fh, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.WriteAt([]byte("garbage"), at); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	code, out = run("fsck", devName)
	if code == 0 || !strings.Contains(out, "DAMAGE") {
		t.Fatalf("fsck of a damaged device: exit %d\n%s", code, out)
	}
}

func TestFormatRefusesADeviceInUse(t *testing.T) {
	devName := fmt.Sprintf("emu:%s?zone_size=1M&zones=16", filepath.Join(t.TempDir(), "dev"))
	lock, err := server.LockDevice(devName) // what a serving daemon holds
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	for _, args := range [][]string{{"format", "--force", devName}, {"fsck", devName}, {"bench", "run", devName, "--size", "1M"}} {
		out.Reset()
		errOut.Reset()
		if code := Main(args, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), "locked") && !strings.Contains(errOut.String(), "in use") && !strings.Contains(errOut.String(), "another") {
			t.Errorf("%v on a device in use: exit %d, %q", args, code, errOut.String())
		}
	}
	lock.Release()
	if code := Main([]string{"format", devName}, &out, &errOut); code != 0 {
		t.Fatalf("format after the claim was released: %s", errOut.String())
	}
}

// format used to accept devices of 2 to 5 zones, which serve then refused
// and fsck called damaged.
func TestFormatRefusesTooFewZones(t *testing.T) {
	dir := t.TempDir()
	for zones := 2; zones <= 6; zones++ {
		path := filepath.Join(dir, fmt.Sprint(zones))
		dev := fmt.Sprintf("emu:%s?zone_size=1M&zones=%d", path, zones)
		var out, errOut bytes.Buffer
		code := Main([]string{"format", dev}, &out, &errOut)
		if zones == 6 {
			if code != 0 {
				t.Fatalf("format of 6 zones: %s", errOut.String())
			}
			continue
		}
		want := fmt.Sprintf("the device has %d zones; zonefold needs at least 6 (4 data zones after the 2 metadata zones)", zones)
		if code == 0 || !strings.Contains(errOut.String(), want) {
			t.Errorf("format of %d zones: exit %d, %q; want %q", zones, code, errOut.String(), want)
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("refused format of %d zones left %s: %v", zones, path, err)
		}
	}
}

// TestFsckSaysZonesFormattedNotUsed: fsck's first line gives the zones
// the file system was formatted on (format --zones), which are not zones
// holding data: on an empty file system it said "8 of 8 zones used".
func TestFsckSaysZonesFormattedNotUsed(t *testing.T) {
	devName := fmt.Sprintf("emu:%s?zone_size=1M&zones=8", filepath.Join(t.TempDir(), "dev"))
	var out, errOut bytes.Buffer
	if code := Main([]string{"format", devName, "--zones", "6"}, &out, &errOut); code != 0 {
		t.Fatalf("format: exit %d, %s", code, errOut.String())
	}
	out.Reset()
	if code := Main([]string{"fsck", devName}, &out, &errOut); code != 0 {
		t.Fatalf("fsck: exit %d, %s", code, errOut.String())
	}
	first, _, _ := strings.Cut(out.String(), "\n")
	if want := "formatted on 6 of 8 zones"; !strings.Contains(first, want) || strings.Contains(first, "used") {
		t.Errorf("fsck's first line %q; want it to say %q", first, want)
	}
}
