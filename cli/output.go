package cli

import (
	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/zns"
)

// The JSON objects the commands print with --json: snake_case keys, sizes
// in bytes, the file system id as its hex string.

// fsckJSON is `fsck --json`.
type fsckJSON struct {
	Device    string   `json:"device"`
	UUID      string   `json:"uuid"`
	Zones     int      `json:"zones"`
	UsedZones int      `json:"used_zones"`
	Files     int      `json:"files"`
	Extents   int      `json:"extents"`
	Records   int      `json:"records"`
	LiveBytes int64    `json:"live_bytes"`
	Replayed  int      `json:"replayed"`
	Notes     []string `json:"notes"`
	Problems  []string `json:"problems"`
	Clean     bool     `json:"clean"`
	// With --copy-to: the directory, how many files were copied, and
	// the ranges not recovered (and files not copied at all).
	CopyTo       string             `json:"copy_to,omitzero"`
	Copied       *int               `json:"copied,omitzero"`
	NotRecovered []notRecoveredJSON `json:"not_recovered,omitzero"`
	// A signal stopped the copy in this file, not kept in DIR (the
	// text report's "interrupted:" line).
	InterruptedIn string `json:"interrupted_in,omitzero"`
}

// notRecoveredJSON is a range of a file fsck --copy-to left a hole, or a
// file it did not copy (offset 0, its whole length, NotCopied: a hole
// that is a whole file has that shape too, but DIR holds that file).
type notRecoveredJSON struct {
	File      string `json:"file"`
	Offset    int64  `json:"offset"`
	Length    int64  `json:"length"`
	Why       string `json:"why"`
	NotCopied bool   `json:"not_copied,omitzero"`
}

func fsckOutput(device string, r *engine.FsckReport) fsckJSON {
	return fsckJSON{
		Device: device, UUID: r.Superblock.ID(), Zones: r.Superblock.Zones, UsedZones: r.Superblock.UsedZones,
		Files: r.Files, Extents: r.Extents, Records: r.Records, LiveBytes: r.LiveBytes, Replayed: r.Replayed,
		Notes: orEmpty(r.Notes), Problems: orEmpty(r.Problems), Clean: len(r.Problems) == 0,
	}
}

// orEmpty makes a nil list print as [] rather than null.
func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// formatJSON is `format --json`.
type formatJSON struct {
	Device    string `json:"device"`
	UUID      string `json:"uuid"`
	Zones     int    `json:"zones"`
	UsedZones int    `json:"used_zones"`
	ZoneSize  int64  `json:"zone_size"`
	ZoneCap   int64  `json:"zone_cap"`
	MetaZones [2]int `json:"meta_zones"`
	// MetaGroup is the zones in each metadata half, from MetaZones[i].
	MetaGroup int `json:"meta_group"`
}

// geometryJSON is a device's geometry in `zones report --json`.
type geometryJSON struct {
	Zones        int   `json:"zones"`
	ZoneSize     int64 `json:"zone_size"`
	ZoneCap      int64 `json:"zone_cap"`
	BlockSize    int   `json:"block_size"`
	MaxOpen      int   `json:"max_open"`   // 0: no limit
	MaxActive    int   `json:"max_active"` // 0: no limit
	MaxAppend    int   `json:"max_append"`
	NativeAppend bool  `json:"native_append"`
}

func geometryOutput(g zns.Geometry) geometryJSON {
	return geometryJSON{g.Zones, g.ZoneSize, g.ZoneCap, g.BlockSize, g.MaxOpen, g.MaxActive, g.MaxAppend, g.NativeAppend}
}
