package cli

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/server"
	"github.com/zonefold/zonefold/zns"
)

// newEmu makes an emu device with a conventional zone 0 and one block
// written to zone 1, and returns its device string.
func newEmu(t *testing.T) string {
	t.Helper()
	dev := "emu:" + filepath.Join(t.TempDir(), "dev")
	d, err := zns.Open(dev+"?zone_size=1M&zones=4&zone_cap=512K&conv=1&max_open=2&max_active=2", zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	buf, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(buf)
	done := make(chan error, 1)
	if err := d.Append(1, [][]byte{buf}, appendDone(done)); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	return dev
}

type appendDone chan error

func (a appendDone) Appended(_ int64, err error) { a <- err }

func run(t *testing.T, args ...string) (stdout, stderr string, status int) {
	t.Helper()
	var o, e bytes.Buffer
	status = Main(args, &o, &e)
	return o.String(), e.String(), status
}

// report returns the zones as `zones report --json` prints them.
func report(t *testing.T, dev string) []zoneJSON {
	t.Helper()
	out, errOut, st := run(t, "zones", "report", dev, "--json")
	if st != 0 {
		t.Fatalf("report: status %d: %s", st, errOut)
	}
	var r struct {
		Zones []zoneJSON `json:"zones"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("report --json: %v\n%s", err, out)
	}
	return r.Zones
}

func conds(zs []zoneJSON) string {
	var s []string
	for _, z := range zs {
		s = append(s, z.Cond)
	}
	return strings.Join(s, ",")
}

func TestZonesReport(t *testing.T) {
	dev := newEmu(t)
	out, _, st := run(t, "zones", "report", dev)
	if st != 0 {
		t.Fatalf("status %d", st)
	}
	for _, want := range []string{"4 zones of 1 MiB (capacity 512 KiB), block size 4 KiB, max open 2, max active 2, max append 512 KiB", "conventional", "not-wp", "seq-write-required", "implicit-open", "0x101000", "empty"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	zs := report(t, dev)
	if len(zs) != 4 || zs[1].WP != zs[1].Start+4096 || zs[1].Cap != 512<<10 || zs[2].Type != "seq-write-required" {
		t.Fatalf("report --json: %+v", zs)
	}
}

func TestZonesActions(t *testing.T) {
	dev := newEmu(t)
	steps := []struct {
		args  []string
		conds string
	}{
		{[]string{"open", dev, "--zone", "2"}, "not-wp,implicit-open,explicit-open,empty"},
		{[]string{"close", dev, "--all"}, "not-wp,closed,empty,empty"},
		{[]string{"finish", dev, "--zone", "3"}, "not-wp,closed,empty,full"},
		{[]string{"reset", dev, "--zone", "1"}, "not-wp,empty,empty,full"},
		{[]string{"open", dev, "--all"}, "not-wp,explicit-open,explicit-open,full"},
		{[]string{"finish", dev, "--all"}, "not-wp,full,full,full"},
		{[]string{"reset", dev, "--all"}, "not-wp,empty,empty,empty"},
	}
	for _, s := range steps {
		out, errOut, st := run(t, append([]string{"zones"}, s.args...)...)
		if st != 0 {
			t.Fatalf("zones %v: status %d: %s", s.args, st, errOut)
		}
		if !strings.Contains(out, s.args[0]+": ") {
			t.Errorf("zones %v printed %q", s.args, out)
		}
		if got := conds(report(t, dev)); got != s.conds {
			t.Fatalf("after zones %v: %s, want %s", s.args, got, s.conds)
		}
	}
}

func TestZonesIllegalRequestsChangeNothing(t *testing.T) {
	dev := newEmu(t)
	before := report(t, dev)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"reset", dev, "--zone", "0"}, "conventional zone"},
		{[]string{"finish", dev, "--zone", "0"}, "conventional zone"},
		{[]string{"reset", dev, "--zone", "4"}, "--zone 4: the device has 4 zones (0 to 3)"},
		{[]string{"open", dev, "--zone", "-1"}, `bad count "-1"`},
		{[]string{"reset", dev}, "exactly one of --zone N and --all"},
		{[]string{"reset", dev, "--zone", "1", "--all"}, "exactly one of --zone N and --all"},
		{[]string{"close", dev, "--zone", "2"}, "invalid zone condition transition"},
		{[]string{"open", dev, "--all"}, "the device allows 2"}, // 3 open > 2
		{[]string{"report", "emu:" + t.TempDir() + "/none"}, "does not exist"},
		{[]string{"report", "bogus:x"}, "unknown backend"},
		{[]string{"report"}, "zones report takes DEVICE, got 0 arguments"},
	} {
		_, errOut, st := run(t, append([]string{"zones"}, tc.args...)...)
		if st == 0 {
			t.Errorf("zones %v succeeded", tc.args)
			continue
		}
		if !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "zonefold: ") {
			t.Errorf("zones %v: stderr %q, want one line with %q", tc.args, errOut, tc.want)
		}
		if after := report(t, dev); conds(after) != conds(before) || after[1].WP != before[1].WP {
			t.Fatalf("zones %v changed the device: %s -> %s", tc.args, conds(before), conds(after))
		}
	}
}

// Zone management used to run under a live daemon, changing the zones it
// writes; it is refused as format and fsck are, and changes nothing.
func TestZonesActionsRefuseAClaimedDevice(t *testing.T) {
	dev := newEmu(t)
	before := report(t, dev)
	lock, err := server.LockDevice(dev) // what a serving daemon holds
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	for _, a := range zoneActions {
		_, errOut, st := run(t, "zones", a.verb, dev, "--all")
		if st == 0 || !strings.Contains(errOut, "is in use: another zonefold daemon or command") {
			t.Errorf("zones %s under a daemon: status %d, %q", a.verb, st, errOut)
		}
	}
	if after := report(t, dev); conds(after) != conds(before) || after[1].WP != before[1].WP {
		t.Fatalf("refused requests changed the device: %s -> %s", conds(before), conds(after))
	}
}
