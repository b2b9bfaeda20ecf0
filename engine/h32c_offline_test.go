package engine

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/zonefold/zonefold/internal/syncbuf"
)

// h32cOfflineSetup writes and fsyncs file "a" (first) and file "b"
// (other, in a zone of its own), then takes a's zone offline while it is
// open for appends: its data no longer reads, and it takes no write.
func h32cOfflineSetup(t *testing.T, devName string, cfg Config) (e *Engine, first, other []byte, zone int) {
	t.Helper()
	e = formatOpen(t, devName, cfg)
	first = bytes.Repeat([]byte("before "), 20000)
	f := createSynced(t, e, "a", first)
	f.Close()
	other = bytes.Repeat([]byte("other file "), 30000)
	createSynced(t, e, "b", other).Close()
	z := e.zoneAt(devOf(t, e, "a", 0).dev)
	if z == e.zoneAt(devOf(t, e, "b", 0).dev) {
		t.Fatalf("set-up: a and b share zone %d", z.idx)
	}
	if z.state.Load() != zoneOpen {
		t.Fatalf("set-up: a's zone %d is not open (state %d)", z.idx, z.state.Load())
	}
	if err := emuOf(t, e).ZoneOffline(z.idx); err != nil {
		t.Fatal(err)
	}
	return e, first, other, z.idx
}

// h32cWriteAfter opens "a" and writes second after its first bytes (not
// written back yet: the zone went offline under the file's appends).
func h32cWriteAfter(t *testing.T, e *Engine, first []byte) (f *File, second []byte) {
	t.Helper()
	f, err := e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	second = bytes.Repeat([]byte("after! "), 20000)
	if _, err := f.WriteAt(second, int64(len(first))); err != nil {
		t.Fatal(err)
	}
	return f, second
}

// h32cSyncAgain fsyncs f, which an fsync failed for because its zone
// went offline, until one succeeds, three tries at most: the data goes
// elsewhere.
func h32cSyncAgain(t *testing.T, f *File) {
	t.Helper()
	var err error
	for range 3 {
		if err = f.Sync(); err == nil {
			return
		}
	}
	t.Fatalf("fsyncs after the zone went offline keep failing: %v", err)
}

// TestFsyncAfterTheFilesZoneWentOffline: a zone open for a file's appends
// goes offline (zns: its data no longer reads). The file's next fsync
// fails, a later one succeeds with the data elsewhere; the other file is
// untouched; the log says, as an error, that the zone's data is lost
// (not that it stays readable, as for a zone retired after an EIO).
func TestFsyncAfterTheFilesZoneWentOffline(t *testing.T) {
	var logs syncbuf.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	devName := emuDevice(t, 16, "1M", "&max_open=4&max_active=4")
	cfg := smallConfig()
	e, first, other, zone := h32cOfflineSetup(t, devName, cfg)
	defer e.Close()
	f, second := h32cWriteAfter(t, e, first)
	err := f.Sync()
	if err == nil {
		t.Fatal("fsync with a's zone offline returned nil")
	}
	h32cSyncAgain(t, f)
	z := e.zones[zone]
	e.waitUntil(func() bool { return z.state.Load() != zoneRetiring })
	if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "offline") ||
		!strings.Contains(l, fmt.Sprintf("zone=%d", zone)) {
		t.Fatalf("the zone went offline, and the log does not say so as an error:\n%s", l)
	}
	got := make([]byte, len(second))
	if n, err := f.ReadAt(got, int64(len(first))); n != len(got) || !bytes.Equal(got, second) {
		t.Fatalf("read of the data written after: %d bytes, %v", n, err)
	}
	if got := readAll(t, e, "b"); !bytes.Equal(got, other) {
		t.Fatal("the other file changed")
	}
	// The data the zone lost is written again: the file reads whole.
	if _, err := f.WriteAt(first, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, e, "a"); !bytes.Equal(got, append(append([]byte{}, first...), second...)) {
		t.Fatal("a, written again, does not read back")
	}
}

// TestKill9AfterAZoneWentOfflineStillOpens: after a zone went offline
// and the file's data was written again elsewhere and fsynced, a crash
// (kill -9, power cut) must not keep the file system from opening: the
// acknowledged data is all readable elsewhere, and nothing recovery
// needs lies in the offline zone once the engine has said so durably.
func TestKill9AfterAZoneWentOfflineStillOpens(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "&max_open=4&max_active=4")
	cfg := smallConfig()
	e, first, other, _ := h32cOfflineSetup(t, devName, cfg)
	f, second := h32cWriteAfter(t, e, first)
	f.Sync() // fails: the zone went offline under the append
	if _, err := f.WriteAt(first, 0); err != nil {
		t.Fatal(err)
	}
	h32cSyncAgain(t, f)
	want := append(append([]byte{}, first...), second...)
	e = powerCutReopen(t, e, devName, cfg)
	defer e.Close()
	if got := readAll(t, e, "a"); !bytes.Equal(got, want) {
		t.Fatalf("a after the crash: %d bytes, want the %d fsynced", len(got), len(want))
	}
	if got := readAll(t, e, "b"); !bytes.Equal(got, other) {
		t.Fatal("b after the crash differs")
	}
}

// TestCloseAfterAZoneWentOfflineStillOpens: a zone holding a file's
// fsynced data goes offline while nothing writes to it (the engine does
// not notice), and the engine is closed cleanly. The device must open
// again: the other file reads, reads of the lost data fail (never zeros
// or older bytes), and the file takes its data again.
func TestCloseAfterAZoneWentOfflineStillOpens(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "&max_open=4&max_active=4")
	cfg := smallConfig()
	e, first, other, zone := h32cOfflineSetup(t, devName, cfg)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	rep := fsckOf(t, devName)
	if len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], fmt.Sprintf("zone %d is offline", zone)) ||
		!strings.Contains(rep.Problems[0], `"a"`) {
		t.Fatalf("fsck with a's data in offline zone %d: problems %q, want one that says so", zone, rep.Problems)
	}
	e, err := Open(devName, cfg)
	if err != nil {
		t.Fatalf("reopen after a clean close with zone %d offline: %v", zone, err)
	}
	defer e.Close()
	if got := readAll(t, e, "b"); !bytes.Equal(got, other) {
		t.Fatal("b differs")
	}
	f, err := e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(first))
	n, err := f.ReadAt(buf, 0)
	if err == nil {
		t.Fatalf("read of a's data in the offline zone: %d bytes, no error", n)
	}
	t.Logf("read of the data the offline zone held: %v", err)
	// Cut to nothing first: a write of the whole file would read the
	// partial last block it leaves past the end, and fail.
	if err := f.Truncate(0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(first, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, e, "a"); !bytes.Equal(got, first) {
		t.Fatal("a, written again, does not read back")
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	// Nothing maps data there now: a note, no damage.
	rep = fsckOf(t, devName)
	if len(rep.Problems) > 0 || !slices.ContainsFunc(rep.Notes, func(n string) bool {
		return strings.Contains(n, fmt.Sprintf("zone %d is offline", zone))
	}) {
		t.Fatalf("fsck with offline zone %d unused: problems %q, notes %q", zone, rep.Problems, rep.Notes)
	}
}

// TestKill9RightAfterAZoneWentOfflineRefusesClearly: a zone holding a
// file's records newer than the last checkpoint goes offline and the
// daemon is killed before any checkpoint: recovery cannot tell what
// acknowledged data the zone held, so Open refuses with ErrZoneOffline,
// saying which zone and why, and fsck reports it rather than fail.
func TestKill9RightAfterAZoneWentOfflineRefusesClearly(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "&max_open=4&max_active=4")
	cfg := smallConfig()
	e, _, _, zone := h32cOfflineSetup(t, devName, cfg)
	emu := emuOf(t, e)
	if err := emu.Flush(); err != nil { // the zone's condition is durable
		t.Fatal(err)
	}
	e.crashForTest()
	emu.Close()
	_, err := Open(devName, cfg)
	if !errors.Is(err, ErrZoneOffline) || !strings.Contains(err.Error(), fmt.Sprintf("data zone %d is offline", zone)) {
		t.Fatalf("open with zone %d offline holding records newer than the checkpoint: %v, want ErrZoneOffline naming it", zone, err)
	}
	rep := fsckOf(t, devName)
	if len(rep.Problems) == 0 || !strings.Contains(rep.Problems[0], "offline") {
		t.Fatalf("fsck: problems %q, want one saying the zone is offline", rep.Problems)
	}
	t.Logf("open: %v", err)
}

// TestStartReadOfAnOfflineZoneEnds: a cold read begun with StartRead (the
// daemon's way) of data in a zone gone offline, whose device read the
// device refuses at once, ends with an error, puts nothing in the cache,
// and leaves the engine able to close.
func TestStartReadOfAnOfflineZoneEnds(t *testing.T) {
	const bs = 64 << 10
	devName := emuDevice(t, 16, "4M", "")
	e := formatOpen(t, devName, smallConfig())
	data := pattern(4*bs, 5)
	createSynced(t, e, "a", data).Close()
	createSynced(t, e, "b", data).Close() // another zone's reads go on
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = reopen(t, devName, smallConfig())
	h, err := e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.ReadAt(make([]byte, bs), 3*bs); err != nil { // the file's cache state
		t.Fatal(err)
	}
	zone := e.zoneAt(devOf(t, e, "a", 0).dev).idx
	if zone == e.zoneAt(devOf(t, e, "b", 0).dev).idx {
		t.Fatalf("set-up: a and b share zone %d", zone)
	}
	if err := emuOf(t, e).ZoneOffline(zone); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, bs)
	r := h31bStartOne(t, e, h, p, 0)
	if r.again && r.err == nil {
		// A read at 0 begins a sequential stream: StartRead filled past
		// the request (to the part boundary), and a failed fill is no
		// reader's: the caller reads again, the waiting way, as the
		// daemon does, and that read's failure is the read's.
		_, r.err = h.ReadAt(p, 0)
		r.again = false
	}
	if r.err == nil || r.again {
		t.Fatalf("StartRead of data in offline zone %d: %+v, want an error", zone, r)
	}
	t.Logf("StartRead: %v", r.err)
	if h.ReadCached(p, 0) {
		t.Fatal("the failed read's folio is in the cache")
	}
	if got := readAll(t, e, "b"); !bytes.Equal(got, data) {
		t.Fatal("b differs")
	}
	h.Close()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestOpenWithAMetadataZoneOfflineSaysWhy: a metadata zone goes offline
// (the older half, so Close's checkpoint goes into the active half's own
// log). Recovery cannot tell whether the newest checkpoint was in it, so
// Open refuses; but it must say so as the engine (what it read, where),
// not fail on the superblock copy there with the bare device error while
// the other copy reads, and fsck must report it rather than fail.
func TestOpenWithAMetadataZoneOfflineSaysWhy(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	e := formatOpen(t, devName, smallConfig())
	createSynced(t, e, "a", pattern(8192, 1)).Close()
	half := 1 - e.meta.active
	z := e.sb.MetaZones[half]
	if err := emuOf(t, e).ZoneOffline(z); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := Open(devName, smallConfig())
	if err == nil || !strings.HasPrefix(err.Error(), fmt.Sprintf("engine: recover: read metadata half %d", half)) {
		t.Fatalf("open with metadata zone %d (half %d) offline: %v, want recovery's error naming the half", z, half, err)
	}
	t.Logf("open: %v", err)
	rep := fsckOf(t, devName)
	if len(rep.Problems) == 0 || !strings.Contains(rep.Problems[0], "offline") {
		t.Fatalf("fsck: problems %q, want one saying what is offline", rep.Problems)
	}
}
