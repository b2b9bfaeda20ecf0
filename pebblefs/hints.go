package pebblefs

import (
	"log/slog"

	"github.com/cockroachdb/pebble/v2"

	"github.com/zonefold/zonefold/engine"
)

// bottomLevel is Pebble's last LSM level (it has seven, not exported).
const bottomLevel = 6

// lifeOfLevel is the write-life hint of a table written to an LSM level:
// data moves down and lives longer the deeper it sits, the bottom level
// longest (RocksDB's CalculateSSTWriteHint, which ZenFS places by, does
// the same).
func lifeOfLevel(level int) engine.WriteLife {
	switch {
	case level <= 0:
		return engine.LifeMedium
	case level >= bottomLevel:
		return engine.LifeExtreme
	default:
		return engine.LifeLong
	}
}

// EventListener returns the listener that gives each table the hint of
// the level its compaction writes it to. Install it in pebble.Options
// (pebble.TeeEventListener combines it with another); without it, tables
// keep the hint of their write category.
func (y *FS) EventListener() *pebble.EventListener {
	return &pebble.EventListener{
		CompactionBegin: func(info pebble.CompactionInfo) {
			y.mu.Lock()
			y.levels[info.JobID] = info.Output.Level
			y.mu.Unlock()
		},
		CompactionEnd: func(info pebble.CompactionInfo) {
			y.mu.Lock()
			delete(y.levels, info.JobID)
			y.mu.Unlock()
		},
		TableCreated: func(info pebble.TableCreateInfo) {
			y.mu.Lock()
			level, ok := y.levels[info.JobID]
			y.mu.Unlock()
			if !ok {
				return // a flush: L0, as its category says
			}
			y.setLife(info.Path, lifeOfLevel(level))
		},
	}
}

// setLife sets the hint of the file at name, which Pebble just created.
func (y *FS) setLife(name string, l engine.WriteLife) {
	h, err := y.e.Open(clean(name))
	if err != nil {
		slog.Debug("pebblefs: hint for a table that is gone", "path", name, "err", err)
		return
	}
	defer h.Close()
	if err := h.SetWriteLife(l); err != nil {
		slog.Warn("pebblefs: set write-life hint", "path", name, "err", err)
	}
}
