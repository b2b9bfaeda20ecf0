package pebblefs

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/zonefold/zonefold/engine"
)

// fatalLogger fails the test on Pebble's fatal log (a WAL or MANIFEST
// write it cannot complete: the process would end) and panics, as
// Pebble expects Fatalf not to return.
type fatalLogger struct{ t *testing.T }

func (fatalLogger) Infof(string, ...any)  {}
func (fatalLogger) Errorf(string, ...any) {}
func (l fatalLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.t.Errorf("pebble: fatal: %s", msg)
	panic("pebble: fatal: " + msg)
}

// fillBallast writes a file of another tenant of the device (no Pebble
// file) until the device refuses it, and returns its size. It writes 64
// KiB at a time, then 4 KiB once that is refused: the room a refused 64
// KiB write leaves (up to ~68 KiB past the reserve) took a small table
// (CI111: TestFailedIngestOnFullDeviceLeavesNothingAfterReopen's ingest
// went through on the "full" device).
func fillBallast(t *testing.T, y *FS, name string) int64 {
	t.Helper()
	f, err := y.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	var n int64
	for i := 0; ; i++ {
		buf[0] = byte(i)
		w, err := f.Write(buf)
		n += int64(w)
		if err == nil && i%16 == 15 {
			err = f.Sync()
		}
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("ballast write: %v, want ENOSPC once the device is full", err)
			}
			if len(buf) > 4<<10 {
				buf = buf[:4<<10]
				continue
			}
			break
		}
	}
	if err := f.Sync(); err != nil && !errors.Is(err, syscall.ENOSPC) {
		t.Fatal(err)
	}
	return n
}

// A device full of another tenant's data (or of Pebble's own tables)
// refuses Pebble's table writes and never its WAL's or MANIFEST's: the
// space FS.ReserveFor keeps is theirs. Pebble treats a failed WAL or
// MANIFEST write as fatal (its commit pipeline's Fatalf; rotateWAL's
// panic, with its mutex held, which no recover catches and which ended
// CI's bench test binary), and a failed flush or compaction as a
// background error it retries. So every write synced while the device
// is full is acknowledged, survives closing and reopening Pebble on the
// full device, and once the ballast is removed the flush that failed
// goes through and compactions run, losing nothing. Before the
// reserve, the first synced write after the ballast filled the device
// was fatal.
func TestFullDeviceFailsTablesNeverTheWAL(t *testing.T) {
	dev := emuDevice(t, 32, "1M")
	cfg := engine.Config{CacheBytes: 8 << 20, DirtyLimit: 1 << 20}
	e := formatOpen(t, dev, 0, cfg)
	y := New(e)
	tableFull := make(chan error, 1)
	open := func(y *FS) *pebble.DB {
		t.Helper()
		o := smallOptions(y)
		o.Logger = fatalLogger{t}
		tee := pebble.TeeEventListener(*y.EventListener(), pebble.EventListener{
			BackgroundError: func(err error) {
				if errors.Is(err, syscall.ENOSPC) {
					select {
					case tableFull <- err:
					default:
					}
				}
			},
		})
		o.EventListener = &tee
		if r := y.ReserveFor(o); r <= 0 {
			t.Fatalf("ReserveFor reserved %d bytes", r)
		}
		db, err := pebble.Open("db", o)
		if err != nil {
			t.Fatalf("open Pebble: %v", err)
		}
		return db
	}
	db := open(y)

	m := model{}
	n := 0
	set := func(count int) {
		t.Helper()
		for range count {
			k, v := fmt.Appendf(nil, "k%06d", n), fmt.Appendf(nil, "%01000d", n)
			if err := db.Set(k, v, pebble.Sync); err != nil {
				t.Fatalf("set %s: %v", k, err)
			}
			m[string(k)] = v
			n++
		}
	}
	set(100)
	ballast := fillBallast(t, y, "ballast")
	t.Logf("ballast: %d bytes of a capacity of %d", ballast, e.Capacity())

	// Less than two memtables (256 KiB each) of synced writes: a
	// rotation, whose flush meets the full device, and no write stall.
	set(150)
	select {
	case err := <-tableFull:
		var pe *fs.PathError
		if !errors.As(err, &pe) || pe.Op != "write" && pe.Op != "sync" {
			t.Fatalf("Pebble's background error: %v, want a table's write or sync failing with ENOSPC", err)
		}
		t.Logf("a flush met the full device: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("no flush met ENOSPC within a minute (hang guard)")
	}
	set(20)
	verify(t, db, m)
	if err := db.Close(); err != nil {
		t.Logf("close Pebble on a full device: %v", err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("close engine: %v", err)
	}

	// Reopened on the full device, read-only (a writable Open waits
	// for the flush of the replayed WAL, which fails and is retried for
	// as long as the device is full): every synced write is there.
	e = reopenEngine(t, dev, cfg)
	defer e.Close()
	y = New(e)
	ro := smallOptions(y)
	ro.Logger, ro.ReadOnly = fatalLogger{t}, true
	db, err := pebble.Open("db", ro)
	if err != nil {
		t.Fatalf("open Pebble read-only on the full device: %v", err)
	}
	verify(t, db, m)
	if err := db.Close(); err != nil {
		t.Fatalf("close Pebble: %v", err)
	}

	// Room again: the flush Pebble retries goes through, deletes
	// compact, and nothing synced is lost.
	if err := y.Remove("ballast"); err != nil {
		t.Fatal(err)
	}
	db = open(y)
	verify(t, db, m)
	set(20)
	if err := flushWithin(db, time.Minute); err != nil {
		t.Fatalf("flush once the ballast is removed: %v", err)
	}
	for k := range m {
		if k[len(k)-1]%2 == 0 {
			if err := db.Delete([]byte(k), pebble.Sync); err != nil {
				t.Fatalf("delete %s: %v", k, err)
			}
			delete(m, k)
		}
	}
	if err := db.Compact(t.Context(), []byte("k"), []byte("l"), true); err != nil {
		t.Fatalf("compact: %v", err)
	}
	verify(t, db, m)
	if err := db.Close(); err != nil {
		t.Fatalf("close Pebble: %v", err)
	}
	db = open(y)
	verify(t, db, m)
	if err := db.Close(); err != nil {
		t.Fatalf("close Pebble: %v", err)
	}
}

// flushWithin flushes db, failing if it has not within d: a hang guard
// (Pebble's Flush waits for as long as its flush keeps failing).
func flushWithin(db *pebble.DB, d time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- db.Flush() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		return fmt.Errorf("no flush within %v (hang guard)", d)
	}
}
