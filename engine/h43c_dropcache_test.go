package engine

import (
	"bytes"
	"testing"
)

// TestDropCacheMakesReadsComeFromTheDevice: DropCache writes a file's
// dirty data back and empties the cache, so that the next read of it is
// served by the device (bench run's read modes time device reads so),
// with the data intact.
func TestDropCacheMakesReadsComeFromTheDevice(t *testing.T) {
	e := formatOpen(t, emuDevice(t, 16, "1M", ""), smallConfig())
	defer e.Close()
	f := mustCreate(t, e, "f")
	want := bytes.Repeat([]byte("zonefold"), 256<<10/8)
	if _, err := f.WriteAt(want, 0); err != nil {
		t.Fatal(err)
	}
	if got := e.Stats().Cache.CachedBytes; got < int64(len(want)) {
		t.Fatalf("after a write of %d bytes the cache holds %d", len(want), got)
	}
	freed, err := e.DropCache(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if freed < int64(len(want)) || e.Stats().Cache.CachedBytes != 0 {
		t.Errorf("DropCache freed %d, and %d bytes stay cached; want the file's %d freed and none left", freed, e.Stats().Cache.CachedBytes, len(want))
	}
	before := e.Stats().DevRead
	got := make([]byte, len(want))
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the file read after DropCache differs from what was written")
	}
	if read := e.Stats().DevRead - before; read < int64(len(want)) {
		t.Errorf("a read after DropCache read %d bytes from the device; want all %d", read, len(want))
	}
}
