package bench

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Syncs are counted under the kind of Pebble file synced: WAL, table,
// MANIFEST, directory, other; a phase's latencies are those since its
// snapshot, kinds without a sync left out.
func TestSyncCountingFSCountsSyncsByKind(t *testing.T) {
	c := &syncCountingFS{FS: vfs.NewMem()}
	if err := c.MkdirAll("db", 0o755); err != nil {
		t.Fatal(err)
	}
	sync := func(f vfs.File, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	sync(c.Create("db/000001.log", vfs.WriteCategoryUnspecified))
	s0 := c.snapshot()
	sync(c.Create("db/000002.log", vfs.WriteCategoryUnspecified))
	sync(c.Create("db/000003.sst", vfs.WriteCategoryUnspecified))
	sync(c.Create("db/000004.sst", vfs.WriteCategoryUnspecified))
	sync(c.Create("db/MANIFEST-000005", vfs.WriteCategoryUnspecified))
	sync(c.OpenDir("db"))
	sync(c.Create("db/OPTIONS-000006", vfs.WriteCategoryUnspecified))
	want := map[string]int64{"wal": 1, "table": 2, "manifest": 1, "dir": 1, "other": 1}
	got := c.latencies(s0)
	if len(got) != len(want) {
		t.Fatalf("kinds %+v; want %v", got, want)
	}
	for _, l := range got {
		if l.Count != want[l.Kind] {
			t.Errorf("%s: %d syncs; want %d", l.Kind, l.Count, want[l.Kind])
		}
	}
	if n := c.syncs.Load(); n != 7 {
		t.Errorf("%d syncs counted; want 7", n)
	}
}
