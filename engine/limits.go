package engine

import "fmt"

// FormatZonesError is a FormatOptions.Zones below the zones zonefold
// needs on the device (its metadata halves, then the data zones Open
// needs beside GC's reserve): the caller's choice, not the device's
// fault, so a command line reports it as a bad flag value.
type FormatZonesError struct {
	// Zones is what was asked, Least the fewest zonefold takes on this
	// device, DeviceZones the zones it has.
	Zones, Least, DeviceZones int
}

func (e *FormatZonesError) Error() string {
	return fmt.Sprintf("engine: format: %d zones asked for; the device has %d and zonefold needs at least %d", e.Zones, e.DeviceZones, e.Least)
}

// ReadaheadCap is the largest Config.ReadaheadMax the engine takes with
// a cache of cacheBytes: a thirty-second of it, and at least the
// smallest window. A larger one is lowered to it.
func ReadaheadCap(cacheBytes int64) int64 { return max(readaheadMin, cacheBytes/32) }

// DefaultGCLow is GCConfig.Low when it is left 0 (on a device with one
// GC stream; a zone more per stream beyond it): GC starts below this many
// free zones. A High at or below it, given without a Low, is moved to two
// above it.
func DefaultGCLow() int {
	var c GCConfig
	c.fill()
	return c.Low
}
