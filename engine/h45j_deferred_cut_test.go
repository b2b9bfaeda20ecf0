package engine

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"testing"
)

// A create with ODeferSync is held (metaLog.pend, format 3) until the
// next flush that acknowledges something lands it: the file's own
// fsync, another file's, Engine.Sync (a client's fsync of handle 0),
// SyncNamespace, or a durable namespace change. The kill -9 loop
// (cli/killns_test.go) could not catch an fsync that returned with the
// create still held: the create then reaches the device only with the
// next namespace record, and random kills almost never land in that
// gap. Here the power is cut the moment the acknowledging call returns,
// with nothing after it, on an engine whose GC is off and that logs
// nothing else: only that call can have made the create durable.

// h45jOther is the content of "other", a file created and fsynced
// before the deferred create.
var h45jOther = []byte("other, created durably and fsynced")

// h45jData is what a case writes to the deferred file "d".
var h45jData = bytes.Repeat([]byte("h45j-d"), 3000)

// h45jCase is a deferred create of "d", then act (with d's handle and
// other's), then a power cut. want is the whole namespace after the
// cut, each file's exact content.
type h45jCase struct {
	name string
	// write: d is written (h45jData) before act; a case whose act
	// promises d's create but not its data (another file's fsync,
	// SyncNamespace) leaves d empty, so that d's content is exact too.
	write bool
	act   func(t *testing.T, e *Engine, d, other *File) error
	want  map[string][]byte
}

func TestH45jDeferredCreateSurvivesACutRightAfterItsSync(t *testing.T) {
	syncD := func(t *testing.T, e *Engine, d, other *File) error { return d.Sync() }
	syncOther := func(t *testing.T, e *Engine, d, other *File) error { return other.Sync() }
	syncEngine := func(t *testing.T, e *Engine, d, other *File) error { return e.Sync(context.Background()) }
	// then runs first, then sync: a namespace change of d before any
	// sync.
	then := func(first func(e *Engine) error, sync func(t *testing.T, e *Engine, d, other *File) error) func(t *testing.T, e *Engine, d, other *File) error {
		return func(t *testing.T, e *Engine, d, other *File) error {
			if err := first(e); err != nil {
				return err
			}
			return sync(t, e, d, other)
		}
	}
	rename := func(e *Engine) error { return e.Rename("d", "r") }
	removeDeferred := func(e *Engine) error { return e.RemoveDeferred("d") }
	remove := func(e *Engine) error { return e.Remove("d") }
	empty := []byte{}
	otherNew := append(bytes.Clone(h45jOther), " and more"...)
	cases := []h45jCase{
		// (1) Its own fsync promises its create and its data.
		{name: "own fsync", write: true, act: syncD,
			want: map[string][]byte{"d": h45jData, "other": h45jOther}},
		// (2) Engine.Sync (handle 0's fsync) writes back every file
		// and flushes: the create and the data.
		{name: "engine sync", write: true, act: syncEngine,
			want: map[string][]byte{"d": h45jData, "other": h45jOther}},
		// (3) Another file's fsync promises every deferred create
		// logged before it (ODeferSync: "its own Sync, any other
		// file's"), not that file's data: d is left unwritten, so it
		// must be there, empty. Whether the other file has data of its
		// own to flush or none.
		{name: "other file's fsync, nothing new in it", act: syncOther,
			want: map[string][]byte{"d": empty, "other": h45jOther}},
		{name: "other file's fsync, new data in it",
			act: func(t *testing.T, e *Engine, d, other *File) error {
				if _, err := other.WriteAt(otherNew, 0); err != nil {
					t.Fatal(err)
				}
				return other.Sync()
			},
			want: map[string][]byte{"d": empty, "other": otherNew}},
		// SyncNamespace: the directory fsync the create defers to.
		{name: "namespace sync", act: func(t *testing.T, e *Engine, d, other *File) error { return e.SyncNamespace() },
			want: map[string][]byte{"d": empty, "other": h45jOther}},
		// (4) A rename or remove of d before any sync, then a sync.
		// A rename is durable (it carries the held create in its
		// record); the fsync after it promises d's data under its new
		// name.
		{name: "rename, then its own fsync", write: true, act: then(rename, syncD),
			want: map[string][]byte{"r": h45jData, "other": h45jOther}},
		{name: "rename, then engine sync", write: true, act: then(rename, syncEngine),
			want: map[string][]byte{"r": h45jData, "other": h45jOther}},
		// A rename onto itself logs nothing, but is durable when it
		// returns: so is the name, the held create.
		{name: "rename onto itself, no sync",
			act:  func(t *testing.T, e *Engine, d, other *File) error { return e.Rename("d", "d") },
			want: map[string][]byte{"d": empty, "other": h45jOther}},
		// A deferred remove is held beside the create; the sync lands
		// both: d is gone.
		{name: "deferred remove, then other file's fsync", write: true, act: then(removeDeferred, syncOther),
			want: map[string][]byte{"other": h45jOther}},
		{name: "deferred remove, then engine sync", write: true, act: then(removeDeferred, syncEngine),
			want: map[string][]byte{"other": h45jOther}},
		// A durable remove, then an fsync of d's handle, still open.
		{name: "remove, then its own fsync", write: true, act: then(remove, syncD),
			want: map[string][]byte{"other": h45jOther}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { h45jRun(t, c) })
	}
}

// h45jRun formats a device, creates other durably, d deferred, runs c
// and cuts the power as soon as c.act returns.
func h45jRun(t *testing.T, c h45jCase) {
	h41bFormat(t, superPackVersion) // holding is format 3's
	cfg := smallConfig()
	cfg.GC.Disabled = true // no GC pass, whose zone reset's record would land the create
	devName := emuDevice(t, 16, "1M", "")
	e := formatOpen(t, devName, cfg)
	other := createSynced(t, e, "other", h45jOther)
	d, err := e.OpenFile("d", OCreate|OExcl|ODeferSync)
	if err != nil {
		t.Fatal(err)
	}
	if c.write {
		if _, err := d.WriteAt(h45jData, 0); err != nil {
			t.Fatal(err)
		}
	}
	// The create must still be held (not landed by anything but act),
	// or a cut here checks nothing of act.
	if !e.meta.pending.Load() {
		t.Fatal("d's deferred create is not held before the sync: the test cannot tell whether the sync landed it")
	}
	if err := c.act(t, e, d, other); err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	e = powerCutReopen(t, e, devName, cfg)
	got := map[string][]byte{}
	for _, fi := range e.List() {
		got[fi.Name] = readAll(t, e, fi.Name)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	names, wantNames := slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(c.want))
	if !slices.Equal(names, wantNames) {
		t.Fatalf("after %s and a power cut right after it returned: files %q, want %q", c.name, names, wantNames)
	}
	for _, n := range wantNames {
		sameBytes(t, n+" after "+c.name+" and a power cut", got[n], c.want[n])
	}
	h41bFsckClean(t, devName)
}
