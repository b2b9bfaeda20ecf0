package pebblefs

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/errors/oserror"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/zonefold/zonefold/engine"
)

// TestFailedIngestOnFullDeviceLeavesNothingAfterReopen: an Ingest of a
// table on a full device fails (pebblefs has no hard links, so
// vfs.LinkOrCopy copies the table and the copy meets ENOSPC; on a kernel
// file system the link takes no room). The copy it failed to fill stays
// in the DB's directory while the DB is open (h18c: neither vfs.Copy nor
// Pebble's ingest removes it; the package doc says so); the next open,
// once there is room, must leave the directory as it was and take the
// ingest.
func TestFailedIngestOnFullDeviceLeavesNothingAfterReopen(t *testing.T) {
	dev := emuDevice(t, 32, "1M")
	cfg := engine.Config{CacheBytes: 8 << 20, DirtyLimit: 1 << 20}
	e := formatOpen(t, dev, 0, cfg)
	defer e.Close()
	y := New(e)
	o := smallOptions(y)
	o.Logger = fatalLogger{t}
	y.ReserveFor(o)
	db, err := pebble.Open("db", o)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { db.Close() }()
	if err := y.MkdirAll("in", 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := y.Create("in/t.sst", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	tw := sstable.NewWriter(objstorageprovider.NewFileWritable(f), sstable.WriterOptions{TableFormat: db.TableFormat()})
	for j := range 1000 {
		if err := tw.Set(fmt.Appendf(nil, "i%06d", j), make([]byte, 500)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	fillBallast(t, y, "ballast")
	before := sortedList(t, y, "db")
	for i := range 3 {
		err := db.Ingest(context.Background(), []string{"in/t.sst"})
		if err == nil {
			t.Fatal("set-up: the ingest went through on the full device")
		}
		t.Logf("ingest %d on the full device: %v", i, err)
	}
	t.Logf("left in the DB's directory while open: %v", stray(t, y, before))
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := y.Remove("ballast"); err != nil {
		t.Fatal(err)
	}
	if db, err = pebble.Open("db", o); err != nil {
		t.Fatal(err)
	}
	// Pebble deletes unreferenced tables in the background after Open.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		left := stray(t, y, before)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a reopen with room, failed ingests' copies are still in the DB's directory: %v", left)
		}
	}
	if err := db.Ingest(context.Background(), []string{"in/t.sst"}); err != nil {
		t.Fatalf("ingest with room: %v", err)
	}
	if v, closer, err := db.Get([]byte("i000999")); err != nil || len(v) != 500 {
		t.Fatalf("an ingested key: %d bytes, %v", len(v), err)
	} else {
		closer.Close()
	}
}

// stray lists the tables of db that are not in before, with their sizes.
func stray(t *testing.T, y *FS, before []string) []string {
	var out []string
	for _, n := range sortedList(t, y, "db") {
		if strings.HasSuffix(n, ".sst") && !slices.Contains(before, n) {
			fi, err := y.Stat("db/" + n)
			if oserror.IsNotExist(err) {
				continue // deleted since the listing (Pebble's cleaner)
			}
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%s (%d bytes)", n, fi.Size()))
		}
	}
	return out
}
