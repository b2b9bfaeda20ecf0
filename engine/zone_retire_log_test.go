package engine

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/zonefold/zonefold/internal/syncbuf"
)

// captureLog sends slog's default logger to a buffer until the test
// ends.
func captureLog(t *testing.T) *syncbuf.Buffer {
	t.Helper()
	buf := &syncbuf.Buffer{}
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(buf, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	return buf
}

// TestFailedAppendRetiresTheZoneAndSaysWhy: an append to a file's zone
// fails on the device; the zone is retired (placement stops using it)
// and the log says so once, with the zone and the device's error, so an
// operator can tell why a zone left service.
//
// Failed before the fix: the zone was retired silently.
func TestFailedAppendRetiresTheZoneAndSaysWhy(t *testing.T) {
	logs := captureLog(t)
	e := formatOpen(t, emuDevice(t, 16, "1M", ""), smallConfig())
	defer e.Close()
	f := mustCreate(t, e, "a")
	defer f.Close()
	if _, err := f.WriteAt(bytes.Repeat([]byte{1}, 64<<10), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	z := f.f.mru.Load()
	emuOf(t, e).FailWrite(1)
	if _, err := f.WriteAt(bytes.Repeat([]byte{2}, 64<<10), 64<<10); err != nil {
		t.Fatal(err)
	}
	_ = f.Sync() // the failed append's data goes elsewhere, or the sync reports EIO
	_ = f.Sync()
	if st := z.state.Load(); st == zoneOpen {
		t.Fatalf("zone %d still open after its append failed", z.idx)
	}
	out := logs.String()
	var line string
	for l := range strings.Lines(out) {
		if strings.Contains(l, "retired") && strings.Contains(l, fmt.Sprintf("zone=%d ", z.idx)) {
			line = l
		}
	}
	if line == "" || !strings.Contains(line, "err=") {
		t.Fatalf("no log line says zone %d was retired and why; the log:\n%s", z.idx, out)
	}
	if n := strings.Count(out, "retired"); n != 1 {
		t.Fatalf("%d log lines say a zone was retired, want 1:\n%s", n, out)
	}
	t.Logf("logged: %s", strings.TrimSpace(line))
}
