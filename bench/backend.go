package bench

import (
	"context"

	"github.com/zonefold/zonefold/engine"
)

// Backend is where a workload's files live. The workload generator
// (Spec.run) knows nothing else of it, so that the same workloads run
// through the engine (EngineBackend) and through a directory on a kernel
// file system (a backend written with ordinary files, its device counters
// read from /sys/block/X/stat) alike.
//
// Every method may be called from many goroutines at once.
type Backend interface {
	// Capacity is the bytes of file data the backend can hold: the
	// workloads' utilisation is a fraction of it.
	Capacity() int64
	// Create makes an empty file, truncating one of the same name.
	Create(name string) (BackendFile, error)
	// Remove deletes a file; its space becomes reclaimable.
	Remove(name string) error
	// Sync makes everything written so far durable.
	Sync(ctx context.Context) error
	// Counters are the backend's cumulative device figures.
	Counters() Counters
}

// BackendFile is an open file of a Backend.
type BackendFile interface {
	WriteAt(ctx context.Context, p []byte, off int64) (int, error)
	Sync(ctx context.Context) error
	Close() error
}

// Counters are what a backend tells of its device: bytes written to it
// and, where the backend knows them, what its garbage collection did. The
// host bytes a workload wrote are counted by the generator itself, so
// that WAF (DevWritten / host bytes) means the same for every backend.
type Counters struct {
	DevWritten int64 // every byte written to the device
	GCWritten  int64 // bytes GC relocated; -1: the backend does not say
	GCResets   int64 // zones GC reset; -1: the backend does not say
	GCNanos    int64 // time spent in GC; -1: the backend does not say
	// Of DevWritten, where the backend knows them (0 otherwise): record
	// headers, zone-tail padding and metadata (log and checkpoints), so
	// that a WAF above 1.0 without GC can be told apart.
	Headers, Pad, Meta int64
	// Unwritten is the host bytes the backend holds that have not
	// reached the device yet (the engine's dirty cache; 0 where not
	// known): what a window's device bytes carry of writes made before
	// it.
	Unwritten int64
}

// zoneReporter is a backend that can list its zones' valid bytes (for
// the valid-data histogram).
type zoneReporter interface {
	ZoneValidity() []engine.ZoneValid
}

// EngineBackend runs workloads through the engine's File API.
type EngineBackend struct{ E *engine.Engine }

// Capacity implements Backend: the engine's data zones' bytes.
func (b EngineBackend) Capacity() int64 { return b.E.Capacity() }

// Create implements Backend.
func (b EngineBackend) Create(name string) (BackendFile, error) {
	f, err := b.E.OpenFile(name, engine.OCreate|engine.OTrunc)
	if err != nil {
		return nil, err
	}
	return engineFile{f}, nil
}

// Remove implements Backend.
func (b EngineBackend) Remove(name string) error { return b.E.Remove(name) }

// Sync implements Backend: every file written back, the device flushed.
func (b EngineBackend) Sync(ctx context.Context) error { return b.E.Sync(ctx) }

// Counters implements Backend from the engine's stats.
func (b EngineBackend) Counters() Counters {
	s := b.E.Stats()
	return Counters{DevWritten: s.DevWritten(), GCWritten: s.GCWritten, GCResets: s.GCResets, GCNanos: s.GCNanos,
		Headers: s.DevHeaders, Pad: s.DevPad, Meta: s.DevMeta, Unwritten: s.DirtyBytes}
}

// Unwritten is Counters().Unwritten on its own (unwrittenReader): the
// engine's dirty bytes, read before the device counters.
func (b EngineBackend) Unwritten() int64 { return b.E.Stats().DirtyBytes }

// ZoneValidity lists the engine's zones' valid bytes.
func (b EngineBackend) ZoneValidity() []engine.ZoneValid { return b.E.ZoneValidity() }

type engineFile struct{ f *engine.File }

func (f engineFile) WriteAt(ctx context.Context, p []byte, off int64) (int, error) {
	return f.f.WriteAtContext(ctx, p, off)
}
func (f engineFile) Sync(ctx context.Context) error { return f.f.SyncContext(ctx) }
func (f engineFile) Close() error                   { return f.f.Close() }
