package zns

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zonefold/zonefold/uring"
)

// openT opens a device string for a test and closes it at cleanup.
func openT(t *testing.T, device string) Device {
	t.Helper()
	d, err := Open(device, Options{RingEntries: 64})
	if err != nil {
		t.Fatalf("Open(%q): %v", device, err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close %q: %v", device, err)
		}
	})
	return d
}

func emuString(t *testing.T, params string) string {
	return "emu:" + filepath.Join(t.TempDir(), "dev") + "?" + params
}

func TestConformance(t *testing.T) {
	const geo = "zone_size=1M&zones=12&zone_cap=768K&max_append=128K"
	for _, tc := range []struct{ name, params string }{
		{"emu", geo + "&conv=1"},
		{"emu-limits", geo + "&max_open=3&max_active=5"},
		{"emu-limits-strict", geo + "&max_open=3&max_active=5&strict_open=1&conv=2"},
		{"emu-open-limit-only", geo + "&max_open=4"},
		{"emu-512", "zone_size=256K&zones=8&block_size=512&max_append=16K&max_open=3&max_active=4"},
		{"null", "null"},
		{"null-limits", "null-limits"},
		{"null-zone-serial", "null-zone-serial"},
		{"null-delay", "null-delay"},
		{"null-zone-serial-delay", "null-zone-serial-delay"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			RunConformance(t, func(t *testing.T) Device {
				switch tc.params {
				case "null":
					return openT(t, "null:?size=12M&zone_size=1M&zone_cap=768K&max_append=128K&conv=1")
				case "null-limits":
					return openT(t, "null:?size=12M&zone_size=1M&zone_cap=768K&max_append=128K&max_open=3&max_active=5")
				case "null-zone-serial":
					return openT(t, "null:?size=12M&zone_size=1M&zone_cap=768K&max_append=128K&max_open=3&max_active=5&conv=1&zone_serial=1")
				case "null-delay":
					return openT(t, "null:?size=12M&zone_size=1M&zone_cap=768K&max_append=128K&conv=1&completion_nsec=20000")
				case "null-zone-serial-delay":
					return openT(t, "null:?size=12M&zone_size=1M&zone_cap=768K&max_append=128K&max_open=3&max_active=5&conv=1&zone_serial=1&completion_nsec=20000")
				}
				return openT(t, emuString(t, tc.params))
			})
		})
	}
}

// TestConformanceDevices runs the suite on the real devices that
// ZONEFOLD_TEST_DEVICES names (comma separated, e.g. in the VM:
// /dev/nullb0,/dev/nvme0n1,/dev/ng0n1). A device named there that cannot
// be opened fails the test.
func TestConformanceDevices(t *testing.T) {
	env := os.Getenv("ZONEFOLD_TEST_DEVICES")
	if env == "" {
		t.Skip("ZONEFOLD_TEST_DEVICES is not set")
	}
	for _, dev := range strings.Split(env, ",") {
		dev = strings.TrimSpace(dev)
		if dev == "" {
			continue
		}
		t.Run(strings.ReplaceAll(strings.TrimPrefix(dev, "/dev/"), "/", "_"), func(t *testing.T) {
			d := openT(t, dev)
			t.Logf("%s: %+v", dev, d.Geometry())
			d.Close()
			RunConformance(t, func(t *testing.T) Device { return openT(t, dev) })
		})
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "plain")
	if err := os.WriteFile(regular, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(dir, "junk")
	if err := os.WriteFile(junk, []byte("not a header"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		device string
		want   string
		is     error
	}{
		{"", "empty device string", nil},
		{"foo:bar", "unknown backend", nil},
		{"emu:", "needs a file", nil},
		{"emu:" + dir + "/x?zone_size=1M", "does not exist", os.ErrNotExist},
		{"emu:" + dir + "/x?zone_size=1M&zones=4&bogus=1", "unknown parameter", nil},
		{"emu:" + dir + "/x?zone_size=1M&zones=4&zones=5", "given twice", nil},
		{"emu:" + dir + "/x?zone_size=1Q&zones=4", "bad size", nil},
		{"emu:" + dir + "/x?zone_size=1M&zones=4&block_size=1000", "unsupported block size", nil},
		{"emu:" + dir + "/x?zone_size=1M&zones=4&block_size=128K", "unsupported block size", nil},
		{"emu:" + dir + "/x?zone_size=1M&zones=4&zone_cap=2M", "zone_cap", nil},
		{"emu:" + dir + "/x?zone_size=1M&zones=4&max_open=5&max_active=2", "exceeds max_active", nil},
		{"emu:" + dir + "/x?zone_size=1M&zones=4&conv=4", "no sequential zone", nil},
		{"emu:" + junk + "?zone_size=1M&zones=4", "format=1", nil},
		{"null:?zone_size=1M", "at least one zone", nil},
		{"null:/x?size=1G&zone_size=1M", "takes no path", nil},
		{"null:?size=1G&zone_size=1M&format=1", "unknown parameter", nil},
		{dir + "/missing", "no such device", os.ErrNotExist},
		{"/dev/null?x=1", "only for emu", nil},
		{regular, "not a device", ErrNotZoned},
	} {
		_, err := Open(tc.device, Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q) = %v, want an error with %q", tc.device, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("Open(%q): error is not one line: %q", tc.device, err)
		}
		if tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("Open(%q) = %v, want it to wrap %v", tc.device, err, tc.is)
		}
	}
}

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"4096", 4096, true}, {"4K", 4096, true}, {"4k", 4096, true}, {"64M", 64 << 20, true},
		{"64MiB", 64 << 20, true}, {"2G", 2 << 30, true}, {"1T", 1 << 40, true}, {"3MB", 3 << 20, true},
		{"1.5M", 3 << 19, true}, {"0", 0, true}, {"512B", 512, true}, {"7E", 7 << 60, true},
		{"", 0, false}, {"M", 0, false}, {"1iB", 0, false}, {"-1", 0, false}, {"+1", 0, false},
		{"1.3K", 0, false}, {"0.5", 0, false}, {"1.", 0, false}, {".5K", 0, false}, {"1.2.3K", 0, false},
		{"99999999999999T", 0, false}, {"8E", 0, false}, {"1X", 0, false}, {"nan", 0, false},
		{"inf", 0, false}, {"1e3", 0, false}, {" 1", 0, false},
	} {
		got, err := ParseSize(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// Absurd geometries used to run away: 10^9 zones of 1 TiB grew tables to
// 24 GB until the OOM killer came; 4 zones of 4 EiB wrapped into negative
// zone starts (null) or a 1 MiB file (emu). Counts were parsed as sizes.
func TestOpenRefusesAbsurdGeometry(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ device, want string }{
		{"null:?zone_size=4194304T&zones=4", "4 zones of 4611686018427387904 bytes overflow a 64-bit byte offset"},
		{"null:?size=16T&zone_size=4K", "zones: an emulated device has at most 1048576"},
		{"emu:" + dir + "/a?zone_size=1T&zones=1000000000", "zones: 1000000000 zones: an emulated device has at most 1048576"},
		{"emu:" + dir + "/b?zone_size=4194304T&zones=4", "overflow a 64-bit byte offset"},
		{"emu:" + dir + "/c?zone_size=1M&zones=-4", `zones: bad count "-4" (want a whole number`},
		{"emu:" + dir + "/d?zone_size=1M&zones=99999999999", `zones: count "99999999999" is too large`},
		{"emu:" + dir + "/e?zone_size=1M&zones=8&max_open=nan", `max_open: bad count "nan"`},
		{"emu:" + dir + "/f?zone_size=inf&zones=8", `zone_size: bad size "inf"`},
		{"emu:" + dir + "/g?zone_size=99999999999999T&zones=8", "is too large (at most 8 EiB)"},
		{"emu:" + dir + "/h?zone_size=1M&zones=8&max_append=1.3K", "not a whole number of bytes"},
	} {
		d, err := Open(tc.device, Options{})
		if err == nil {
			d.Close()
			t.Errorf("Open(%q) succeeded", tc.device)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q) = %v, want an error with %q", tc.device, err, tc.want)
		}
	}
	// A refused create leaves no file behind.
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("refused creates left %v", ents)
	}
}

// FuzzParseSpec: any string parses or fails cleanly, and a parsed spec
// obeys the documented ranges.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{
		"emu:/tmp/x?zone_size=64M&zones=8", "null:?size=16G&zone_size=256M", "/dev/nullb0",
		"emu:/a?zone_size=1M&zones=2&zone_cap=512K&max_open=1&max_active=2&block_size=512&max_append=64K&conv=1&strict_open=1&format=1",
		"null:?", "emu:x?", "emu:?&&", "a:b?c=d", "emu:/x?zones=0", "null:?size=1G&zone_size=9999999999T",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sp, err := parseSpec(s)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		switch sp.kind {
		case kindEmu:
			if sp.path == "" {
				t.Fatalf("%q: emu without a path", s)
			}
		case kindNull:
			if sp.path != "" {
				t.Fatalf("%q: null with a path", s)
			}
		case kindPath:
			if strings.Contains(s, "?") {
				t.Fatalf("%q: a device path with parameters", s)
			}
		default:
			t.Fatalf("%q: kind %q", s, sp.kind)
		}
		if sp.zoneSize < 0 || sp.zoneCap < 0 || sp.size < 0 || sp.zones < 0 || sp.maxOpen < 0 ||
			sp.maxActive < 0 || sp.blockSize < 0 || sp.maxAppend < 0 || sp.conv < 0 {
			t.Fatalf("%q: negative value in %+v", s, sp)
		}
		if sp.kind == kindNull {
			// Geometry checks must not panic either.
			_, _ = softGeometry(sp)
		}
	})
}

func ExampleOpen() {
	dir, _ := os.MkdirTemp("", "zns-example")
	defer os.RemoveAll(dir)
	d, err := Open("emu:"+dir+"/dev?zone_size=64M&zones=16&zone_cap=48M&max_open=4", Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()
	g := d.Geometry()
	fmt.Println(g.Zones, g.ZoneSize>>20, g.ZoneCap>>20, g.MaxOpen)
	// Output: 16 64 48 4
}

func openFileRW(path string) (*os.File, error) { return os.OpenFile(path, os.O_RDWR, 0) }

func newTestWaiter() *uring.Waiter { return uring.NewWaiter() }

// TestOpenRefusesNonZonedDevices opens a block device that is not zoned
// (a loop device, or whatever this machine has) and a character device
// that is not NVMe: each is one clear error line.
func TestOpenRefusesNonZonedDevices(t *testing.T) {
	if _, err := Open("/dev/null", Options{}); err == nil || !strings.Contains(err.Error(), "not an NVMe generic device") {
		t.Errorf("Open(/dev/null) = %v", err)
	}
	blocks, _ := filepath.Glob("/sys/block/*/queue/zoned")
	for _, attr := range blocks {
		b, err := os.ReadFile(attr)
		name := filepath.Base(filepath.Dir(filepath.Dir(attr)))
		if err != nil || strings.TrimSpace(string(b)) != "none" {
			continue
		}
		if _, err := os.Stat("/dev/" + name); err != nil {
			continue
		}
		_, err = Open("/dev/"+name, Options{})
		if !errors.Is(err, ErrNotZoned) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "emu:/dev/"+name) {
			if errors.Is(err, os.ErrPermission) {
				t.Skipf("no permission to open /dev/%s", name)
			}
			t.Fatalf("Open(/dev/%s) = %v, want one line wrapping ErrNotZoned that suggests emu:", name, err)
		}
		return
	}
	t.Skip("no non-zoned block device on this machine")
}

// appendLog records where a device put each append, in completion order.
type appendLog struct {
	mu   sync.Mutex
	offs []int64
	errs []error
	at   []time.Time // when each completed
	done chan struct{}
}

func (l *appendLog) Appended(off int64, err error) {
	now := time.Now()
	l.mu.Lock()
	l.offs, l.errs, l.at = append(l.offs, off), append(l.errs, err), append(l.at, now)
	l.mu.Unlock()
	l.done <- struct{}{}
}

// appendZones appends buf n times to zone 1, then once to zone 2.
func (l *appendLog) appendZones(t *testing.T, dev Device, buf []byte, n int) {
	t.Helper()
	for range n {
		if err := dev.Append(1, [][]byte{buf}, l); err != nil {
			t.Fatal(err)
		}
	}
	if err := dev.Append(2, [][]byte{buf}, l); err != nil {
		t.Fatal(err)
	}
}

// wait waits for n appends to complete.
func (l *appendLog) wait(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-l.done:
		case <-time.After(10 * time.Second):
			t.Fatal("appends did not complete")
		}
	}
}

// With zone_serial=1 a null device lets one write per zone reach the
// ring at a time, as a zoned block device does: appends to one zone
// queued behind its write in flight go out one by one, each once the one
// before has completed (each its own submission), in order, each at its
// own offset, while a zone of its own takes its write at once. Without it
// every append goes out at once, whatever the zone.
func TestNullZoneSerial(t *testing.T) {
	for _, serial := range []bool{false, true} {
		t.Run(fmt.Sprint("zone_serial=", serial), func(t *testing.T) {
			dev := openT(t, fmt.Sprintf("null:?size=8M&zone_size=1M&zone_serial=%v", serial))
			ring := dev.Ring()
			buf := make([]byte, 4096)
			log := &appendLog{done: make(chan struct{}, 16)}
			before := ring.Stats()
			// Plugged, the first append to zone 1 cannot complete
			// before the others are queued behind it.
			ring.Plug()
			log.appendZones(t, dev, buf, 6)
			if err := ring.Unplug(); err != nil {
				t.Fatal(err)
			}
			log.wait(t, 7)
			// The entry that submitted the last append counts it once
			// io_uring_enter returns, which can be after the append
			// completed (null completes inline): wait for the counts.
			st := ring.Stats()
			for deadline := time.Now().Add(10 * time.Second); st.SQEs-before.SQEs < 7 && time.Now().Before(deadline); st = ring.Stats() {
				time.Sleep(time.Millisecond)
			}
			ops, enters := st.SQEs-before.SQEs, st.SubmitEnters-before.SubmitEnters
			if ops != 7 {
				t.Errorf("%d ring operations for 7 appends; want 7", ops)
			}
			// Serial: the unplug submits zone 1's first and zone 2's;
			// each of zone 1's other five waits for the one before.
			if serial && enters < 6 || !serial && enters != 1 {
				t.Errorf("7 appends submitted in %d kernel entries; want %s", enters, map[bool]string{false: "1", true: "6 or more"}[serial])
			}
			var zone1 []int64
			for i, off := range log.offs {
				if log.errs[i] != nil {
					t.Fatalf("append: %v", log.errs[i])
				}
				if off < 2<<20 {
					zone1 = append(zone1, off)
				}
			}
			slices.Sort(zone1)
			for i, off := range zone1 {
				if want := int64(1<<20 + i*4096); off != want {
					t.Errorf("zone 1 append %d at %d; want %d", i, off, want)
				}
			}
		})
	}
}

// completion_nsec=N makes every data operation of a null device complete
// no earlier than N ns after it was submitted, appends and reads alike,
// each on its own: plugged, all of them go to the kernel in one entry.
// With zone_serial=1 as well, a zone's writes take N ns each in turn, so
// the k-th of a zone completes no earlier than k*N after submission (and
// at its own offset, in order). Only lower bounds are asserted: the
// machine may be slow, never early.
func TestNullCompletionDelay(t *testing.T) {
	const delay = 3 * time.Millisecond
	for _, serial := range []bool{false, true} {
		t.Run(fmt.Sprint("zone_serial=", serial), func(t *testing.T) {
			dev := openT(t, fmt.Sprintf("null:?size=8M&zone_size=1M&zone_serial=%v&completion_nsec=%d", serial, delay.Nanoseconds()))
			ring := dev.Ring()
			buf := make([]byte, 4096)
			log := &appendLog{done: make(chan struct{}, 16)}
			w := newTestWaiter()
			before := ring.Stats()
			start := time.Now()
			ring.Plug()
			log.appendZones(t, dev, buf, 4)
			if err := dev.Read(1<<20, make([]byte, 4096), w); err != nil {
				t.Fatal(err)
			}
			if err := ring.Unplug(); err != nil {
				t.Fatal(err)
			}
			res := ring.Wait(w)
			readAt := time.Now()
			if res.Res != 4096 {
				t.Errorf("read: %+v, want 4096 bytes", res)
			}
			if got := readAt.Sub(start); got < delay {
				t.Errorf("read completed %v after submission; want at least %v", got, delay)
			}
			log.wait(t, 5)
			if st := ring.Stats(); !serial && st.SubmitEnters-before.SubmitEnters != 1 {
				t.Errorf("6 operations in %d kernel entries; want 1 (all in flight at once)", st.SubmitEnters-before.SubmitEnters)
			}
			var zone1 []int64
			var last1 time.Time
			for i, off := range log.offs {
				if log.errs[i] != nil {
					t.Fatalf("append: %v", log.errs[i])
				}
				if got := log.at[i].Sub(start); got < delay {
					t.Errorf("append at %d completed %v after submission; want at least %v", off, got, delay)
				}
				if off < 2<<20 {
					zone1 = append(zone1, off)
					last1 = log.at[i]
				}
			}
			if serial {
				if got := last1.Sub(start); got < 4*delay {
					t.Errorf("zone 1's 4th serial append completed %v after submission; want at least 4 x %v", got, delay)
				}
				if !slices.IsSorted(zone1) {
					t.Errorf("zone 1's serial appends completed out of order: %v", zone1)
				}
			}
			slices.Sort(zone1)
			for i, off := range zone1 {
				if want := int64(1<<20 + i*4096); off != want {
					t.Errorf("zone 1 append %d at %d; want %d", i, off, want)
				}
			}
		})
	}
}
