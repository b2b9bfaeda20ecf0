package engine

import (
	"errors"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// TestWatermarksAboveTheDataZonesAreAConfigError: GC.Low or GC.High
// above the device's data zones were taken silently (free zones never
// exceed them: GC ran from the first write, or never stopped). Set by the
// caller, they are a ConfigError naming the setting and the most the
// device takes, as too many OpenZones is; fill's own high watermark,
// which passes a tiny device's data zones, is not refused.
func TestWatermarksAboveTheDataZonesAreAConfigError(t *testing.T) {
	dev, err := zns.Open(emuDevice(t, 6, "1M", "&max_open=6&max_active=6"), zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	data := 6 - MetaZones(dev.Geometry())
	format := &FormatOptions{Force: true}
	for _, c := range []struct {
		cfg     Config
		setting string
		max     int
	}{
		{Config{GC: GCConfig{Low: data + 1}}, "GC.Low", data},
		{Config{GC: GCConfig{Low: 2, High: data + 1}}, "GC.High", data},
		{Config{OpenZones: 5}, "OpenZones", 4},
	} {
		var ce *ConfigError
		if err := CheckConfig(dev, c.cfg, format); !errors.As(err, &ce) || ce.Setting != c.setting || ce.Max != c.max {
			t.Errorf("%+v: %v; want a ConfigError for %s, at most %d", c.cfg, err, c.setting, c.max)
		}
	}
	for _, cfg := range []Config{{}, {GC: GCConfig{Low: data}}, {GC: GCConfig{Low: data - 1, High: data}}, {OpenZones: 4}} {
		if err := CheckConfig(dev, cfg, format); err != nil {
			t.Errorf("%+v on %d data zones: %v", cfg, data, err)
		}
	}
}
