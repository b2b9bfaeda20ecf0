package bench

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// syncCountingFS counts the syncs Pebble asks of a file system's files
// and directories, the same way on both sides: what a comparison of
// ops/s per sync needs (on pebblefs each is a device flush unless a
// concurrent one served it; on a kernel file system an fdatasync or
// fsync). It also times them by the kind of file synced (WAL, table,
// MANIFEST, directory, other): where a side's syncs wait longer.
type syncCountingFS struct {
	vfs.FS
	syncs atomic.Int64
	kinds [syncKinds]syncTimes
}

// The kinds of file a sync is timed under.
const (
	syncKindWAL = iota
	syncKindTable
	syncKindManifest
	syncKindDir
	syncKindOther
	syncKinds
)

var syncKindNames = [syncKinds]string{"wal", "table", "manifest", "dir", "other"}

// syncTimes is the count and total and longest duration of one kind's
// syncs.
type syncTimes struct {
	n, nanos, max atomic.Int64
}

func (t *syncTimes) add(d time.Duration) {
	t.n.Add(1)
	t.nanos.Add(int64(d))
	for {
		m := t.max.Load()
		if int64(d) <= m || t.max.CompareAndSwap(m, int64(d)) {
			return
		}
	}
}

// syncKindOf is the kind of Pebble file name is.
func syncKindOf(name string, dir bool) int {
	base := filepath.Base(name)
	switch {
	case dir:
		return syncKindDir
	case strings.HasSuffix(base, ".log"):
		return syncKindWAL
	case strings.HasSuffix(base, ".sst") || strings.HasSuffix(base, ".blob"):
		return syncKindTable
	case strings.HasPrefix(base, "MANIFEST"):
		return syncKindManifest
	}
	return syncKindOther
}

// syncLatency is one kind's syncs in a phase: how many, their mean and
// longest.
type syncLatency struct {
	Kind   string  `json:"kind"`
	Count  int64   `json:"count"`
	MeanMs float64 `json:"mean_ms"`
	MaxMs  float64 `json:"max_ms"`
}

// syncSnapshot is the counts and total durations by kind, to subtract.
type syncSnapshot [syncKinds][2]int64

func (c *syncCountingFS) snapshot() syncSnapshot {
	var s syncSnapshot
	for i := range c.kinds {
		s[i] = [2]int64{c.kinds[i].n.Load(), c.kinds[i].nanos.Load()}
	}
	return s
}

// latencies is the syncs by kind since s (the longest over the run so
// far, not the phase), the kinds with none left out.
func (c *syncCountingFS) latencies(s syncSnapshot) []syncLatency {
	var out []syncLatency
	for i := range c.kinds {
		n, ns := c.kinds[i].n.Load()-s[i][0], c.kinds[i].nanos.Load()-s[i][1]
		if n == 0 {
			continue
		}
		out = append(out, syncLatency{Kind: syncKindNames[i], Count: n, MeanMs: float64(ns) / float64(n) / 1e6,
			MaxMs: float64(c.kinds[i].max.Load()) / 1e6})
	}
	return out
}

// syncLatencyLine is latencies as "wal 120 x 0.41 ms (max 3.2), ...".
func syncLatencyLine(ls []syncLatency) string {
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = fmt.Sprintf("%s %d x %.2f ms (max %.1f)", l.Kind, l.Count, l.MeanMs, l.MaxMs)
	}
	return strings.Join(parts, ", ")
}

// wrap is what counts the syncs of a file opened at name.
func (c *syncCountingFS) wrap(name string, dir bool) func(vfs.File, error) (vfs.File, error) {
	return func(f vfs.File, err error) (vfs.File, error) {
		if err != nil {
			return f, err
		}
		return &syncCountingFile{File: f, syncs: &c.syncs, times: &c.kinds[syncKindOf(name, dir)]}, nil
	}
}

func (c *syncCountingFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	return c.wrap(name, false)(c.FS.Create(name, cat))
}

func (c *syncCountingFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	return c.wrap(name, false)(c.FS.Open(name, opts...))
}

func (c *syncCountingFS) OpenReadWrite(name string, cat vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return c.wrap(name, false)(c.FS.OpenReadWrite(name, cat, opts...))
}

func (c *syncCountingFS) OpenDir(name string) (vfs.File, error) {
	return c.wrap(name, true)(c.FS.OpenDir(name))
}

func (c *syncCountingFS) ReuseForWrite(oldname, newname string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	return c.wrap(newname, false)(c.FS.ReuseForWrite(oldname, newname, cat))
}

// syncCountingFile counts and times a file's Sync, SyncData and SyncTo
// calls.
type syncCountingFile struct {
	vfs.File
	syncs *atomic.Int64
	times *syncTimes
}

func (f *syncCountingFile) timed(start time.Time) { f.times.add(time.Since(start)) }

func (f *syncCountingFile) Sync() error {
	f.syncs.Add(1)
	defer f.timed(time.Now())
	return f.File.Sync()
}

func (f *syncCountingFile) SyncData() error {
	f.syncs.Add(1)
	defer f.timed(time.Now())
	return f.File.SyncData()
}

func (f *syncCountingFile) SyncTo(length int64) (bool, error) {
	f.syncs.Add(1)
	defer f.timed(time.Now())
	return f.File.SyncTo(length)
}

// Unwrap is the file system counted.
func (c *syncCountingFS) Unwrap() vfs.FS { return c.FS }
