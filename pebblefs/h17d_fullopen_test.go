package pebblefs

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/zonefold/zonefold/engine"
)

// ReserveFor keeps room for "its OPTIONS file, by name (Pebble writes
// it as unspecified)" so that Pebble opens on a full device (the
// package doc: "the OPTIONS file written as Pebble opens would keep it
// from opening on a full device"). But Pebble writes the OPTIONS file
// as temporary.NNNNNN.dbtmp and renames it to OPTIONS-NNNNNN
// (open.go): usesReserve never sees the name OPTIONS-* on a file it
// writes. A DB flushed and closed cleanly (no WAL to replay, so no flush
// to wait for) then fails to open writable on a full device.
func TestH17DWritableOpenOnFullDeviceWritesOptions(t *testing.T) {
	dev := emuDevice(t, 32, "1M")
	cfg := engine.Config{CacheBytes: 8 << 20, DirtyLimit: 1 << 20}
	e := formatOpen(t, dev, 0, cfg)
	defer func() { _ = e.Close() }()
	y := New(e)
	opts := func() *pebble.Options {
		o := smallOptions(y)
		o.Logger = fatalLogger{t}
		y.ReserveFor(o)
		return o
	}
	db, err := pebble.Open("db", opts())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if err := db.Set(fmt.Appendf(nil, "k%06d", i), fmt.Appendf(nil, "%0500d", i), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// Open and close once more: the files the first life left obsolete
	// (its WAL) are deleted now, not at the open on the full device.
	for range 2 {
		if db, err = pebble.Open("db", opts()); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("files: %v", sortedList(t, y, "db"))
	ballast := fillBallast(t, y, "ballast")
	// Then to the last block: small writes until one is refused too.
	bf, err := y.Create("ballast2", "")
	if err != nil {
		t.Fatal(err)
	}
	small := make([]byte, 4096)
	for {
		n, err := bf.Write(small)
		ballast += int64(n)
		if err == nil {
			err = bf.Sync()
		}
		if err != nil {
			break
		}
	}
	bf.Close()
	t.Logf("ballast %d bytes; reserve %d bytes", ballast, e.Reserved())

	// The device refuses a small write of a file ReserveFor does not
	// cover (a probe that Pebble's OPTIONS write is one).
	if pf, err := y.Create("probe", ""); err == nil {
		if _, werr := pf.Write(make([]byte, 2000)); werr == nil {
			t.Fatalf("the device is not full: a 2000-byte write went through")
		}
		pf.Close()
	}
	db, err = pebble.Open("db", opts())
	if err != nil {
		t.Fatalf("writable open on a full device, nothing to replay: %v", err)
	}
	v, c, err := db.Get([]byte("k000007"))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	_ = v
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}
