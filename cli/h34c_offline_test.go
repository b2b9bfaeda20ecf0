package cli

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/zns"
)

// TestFsckAndServeAcceptOfflineZones: a data zone holding file a's data,
// with room left (the last checkpoint had it open), goes offline while
// no daemon runs. serve refuses the device, and its error names
// --accept-offline-zones; fsck's report says the same; fsck with the
// flag recovers past the zone and names a (not b) as damaged; serve with
// it serves b and fails reads of a, and a later serve needs no flag.
func TestFsckAndServeAcceptOfflineZones(t *testing.T) {
	dir := t.TempDir()
	devName := fmt.Sprintf("emu:%s?zone_size=1M&zones=16", filepath.Join(dir, "dev"))
	run := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := Main(args, &out, &errOut)
		return code, out.String() + errOut.String()
	}
	if code, out := run("format", devName); code != 0 {
		t.Fatalf("format: %d %s", code, out)
	}
	e, err := engine.Open(devName, engine.Config{CacheBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		f, err := e.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(bytes.Repeat([]byte(name), 100000), 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	emu := dev.(*zns.Emu)
	const zone = 2 // the first data zone: a's
	if err := emu.ZoneOffline(zone); err != nil {
		t.Fatal(err)
	}
	if err := emu.Flush(); err != nil {
		t.Fatal(err)
	}
	dev.Close()

	code, out := run("serve", "--socket", filepath.Join(dir, "sock"), "--cache", "8M", devName)
	if code == 0 || !strings.Contains(out, "--accept-offline-zones") {
		t.Fatalf("serve with zone %d offline: exit %d, want a refusal naming --accept-offline-zones:\n%s", zone, code, out)
	}
	code, out = run("fsck", devName)
	if code == 0 || !strings.Contains(out, "--accept-offline-zones") {
		t.Fatalf("fsck with zone %d offline: exit %d, want damage naming --accept-offline-zones:\n%s", zone, code, out)
	}
	code, out = run("fsck", "--accept-offline-zones", devName)
	want := fmt.Sprintf("DAMAGE: zone %d is offline", zone)
	if code == 0 || !strings.Contains(out, want) || !strings.Contains(out, `"a"`) || strings.Contains(out, `"b"`) || strings.Contains(out, "recovery:") ||
		!strings.Contains(out, fmt.Sprintf("note: zone %d is offline and may have held records newer", zone)) {
		t.Fatalf("fsck --accept-offline-zones: exit %d, want %q naming a alone:\n%s", code, want, out)
	}
	t.Logf("fsck --accept-offline-zones:\n%s", out)

	// serve --accept-offline-zones serves b and fails reads of a; then
	// a plain serve opens the device as it is.
	for i, flags := range [][]string{{"--accept-offline-zones"}, nil} {
		d := &daemonProc{socket: filepath.Join(dir, fmt.Sprintf("zf%d.sock", i))}
		d.cmd = exec.Command(zonefoldBinary(t), append([]string{"serve", devName, "--socket", d.socket, "--cache", "16M"}, flags...)...)
		d.cmd.Stderr = &d.stderr
		d.done = runServe(t, d.cmd, &d.stderr)
		got := filepath.Join(dir, fmt.Sprintf("b%d", i))
		if code, out := run("get", "b", got, "--socket", d.socket); code != 0 {
			t.Fatalf("serve %q: get b: exit %d\n%s", flags, code, out)
		}
		if b, err := os.ReadFile(got); err != nil || !bytes.Equal(b, bytes.Repeat([]byte("b"), 100000)) {
			t.Fatalf("serve %q: b differs (%v)", flags, err)
		}
		if code, out := run("get", "a", filepath.Join(dir, fmt.Sprintf("a%d", i)), "--socket", d.socket); code == 0 {
			t.Fatalf("serve %q: get a, whose data was in offline zone %d, succeeded\n%s", flags, zone, out)
		}
		if code := d.stop(t, syscall.SIGTERM); code != 0 {
			t.Fatalf("serve %q: exit %d on SIGTERM\n%s", flags, code, d.stderr.String())
		}
	}
}
