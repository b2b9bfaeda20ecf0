package engine

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// TestH45gFreshRoomIsWhatTheFormattedEngineSays: FreshRoom, from the
// zone report alone, is the Capacity and Available of the engine
// FormatAndOpen leaves on the device, whatever shapes them: a zone
// capacity under the zone size, conventional zones (no data), a second
// GC stream and its larger reserve (64 data zones or more), an open
// limit that allows one stream, a reserve the caller set, and a device
// that keeps no data. bench run and bench fio refuse with it, before the
// format, a workload the device cannot hold.
func TestH45gFreshRoomIsWhatTheFormattedEngineSays(t *testing.T) {
	dir := t.TempDir()
	for i, tc := range []struct {
		spec string
		cfg  Config
	}{
		{"emu:%s?zone_size=1M&zones=16", Config{}},
		{"emu:%s?zone_size=1M&zone_cap=768K&zones=16", Config{}},
		{"emu:%s?zone_size=1M&zones=20&conv=3", Config{}},
		{"emu:%s?zone_size=256K&zones=80", Config{}},
		{"emu:%s?zone_size=256K&zones=80&max_open=6&max_active=6", Config{}},
		{"emu:%s?zone_size=256K&zones=80", Config{GC: GCConfig{Reserve: 5, Streams: 2}}},
		{"emu:%s?zone_size=256K&zones=80", Config{OpenZones: 3}},
		{"emu:%s?zone_size=1M&zones=8&max_append=12K", Config{}},
		{"null:?size=64M&zone_size=4M&zone_cap=3M", Config{}},
	} {
		spec := tc.spec
		if strings.HasPrefix(spec, "emu:") {
			spec = fmt.Sprintf(spec, filepath.Join(dir, fmt.Sprintf("dev%d", i)))
		}
		tc.cfg.CacheBytes = 4 << 20
		dev, err := zns.Open(spec, zns.Options{})
		if err != nil {
			t.Fatalf("%s: %v", spec, err)
		}
		capacity, room, err := FreshRoom(dev, tc.cfg)
		if err != nil {
			t.Fatalf("%s: FreshRoom: %v", spec, err)
		}
		fresh, err := FreshLayout(dev, tc.cfg)
		if err != nil {
			t.Fatalf("%s: FreshLayout: %v", spec, err)
		}
		e, err := FormatAndOpen(dev, tc.cfg)
		if err != nil {
			t.Fatalf("%s: %v", spec, err)
		}
		if capacity != e.Capacity() || room != e.Available() {
			t.Errorf("%s: FreshRoom says capacity %d, room %d; the formatted engine %d and %d (GC reserve %d)",
				spec, capacity, room, e.Capacity(), e.Available(), e.GCConfig().Reserve)
		}
		// The bench fits check sizes a workload with FreshLayout before
		// the format (h46h): a part of it (data per record header, zone
		// capacity, pads) not the formatted engine's admission's would let
		// through a workload admission refuses midway.
		if got := e.Layout(); got != fresh || got.Room != e.placer.space() {
			t.Errorf("%s: FreshLayout %+v; the formatted engine's %+v (placer space %d)", spec, fresh, got, e.placer.space())
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
