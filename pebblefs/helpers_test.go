package pebblefs

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/zns"
)

// emuDevice names an emulated device in a test's temporary directory.
// PEBBLEFS_EMU_PARAMS is appended to its parameters, for soaks on other
// geometries: "&max_open=3&max_active=4&zone_cap=768K" runs the tests
// under zone limits, with zones not full to their size (children of the
// crash tests inherit it with the device's name).
func emuDevice(t testing.TB, zones int, zoneSize string) string {
	t.Helper()
	return fmt.Sprintf("emu:%s?zone_size=%s&zones=%d", filepath.Join(t.TempDir(), "dev"), zoneSize, zones) + os.Getenv("PEBBLEFS_EMU_PARAMS")
}

func testConfig() engine.Config {
	return engine.Config{CacheBytes: 32 << 20, DirtyLimit: 16 << 20}
}

// formatOpen formats dev (the first zones zones of it, 0: all) and opens
// an engine on it.
func formatOpen(t testing.TB, devName string, zones int, cfg engine.Config) *engine.Engine {
	t.Helper()
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatalf("open device: %v", err)
	}
	if _, err := engine.Format(dev, engine.FormatOptions{Force: true, Zones: zones}); err != nil {
		dev.Close()
		t.Fatalf("format: %v", err)
	}
	e, err := engine.OpenDevice(dev, cfg)
	if err != nil {
		t.Fatalf("open engine: %v", err)
	}
	return e
}

func reopenEngine(t testing.TB, devName string, cfg engine.Config) *engine.Engine {
	t.Helper()
	e, err := engine.Open(devName, cfg)
	if err != nil {
		t.Fatalf("reopen engine: %v", err)
	}
	return e
}

// quietLogger keeps Pebble's informational chatter out of test output.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any) {}
func (quietLogger) Errorf(format string, args ...any) {
	slog.Error("pebble: " + fmt.Sprintf(format, args...))
}
func (quietLogger) Fatalf(format string, args ...any) {
	panic("pebble: " + fmt.Sprintf(format, args...))
}

// smallOptions make a small Pebble: tiny memtables and tables, so that a
// test's few megabytes go through flushes and compactions at every
// level.
func smallOptions(y *FS) *pebble.Options {
	o := &pebble.Options{
		FS:                          y,
		EventListener:               y.EventListener(),
		Logger:                      quietLogger{},
		MemTableSize:                256 << 10,
		L0CompactionThreshold:       2,
		L0StopWritesThreshold:       8,
		LBaseMaxBytes:               512 << 10,
		FormatMajorVersion:          pebble.FormatNewest,
		MaxManifestFileSize:         64 << 10, // rotate the MANIFEST too
		DisableAutomaticCompactions: false,
	}
	o.TargetFileSizes[0] = 64 << 10
	o.Experimental.LevelMultiplier = 4
	return o
}

// TestMain keeps the engine's informational logs (a recovery per power
// cut) out of the test output.
func TestMain(m *testing.M) {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	os.Exit(m.Run())
}
