package bench

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// bench batching and bench folios printed a size that is not a whole
// number of KiB rounded: --bs 3000 as "2.93 KiB", --bs 1049088 as
// "1 MiB", so the output named a size other than the one run (or
// refused). Such a size is printed exactly, in bytes.
func TestH45dBenchSizesNotWholeKiBAreExact(t *testing.T) {
	err := Batching(&bytes.Buffer{}, BatchingOptions{Duration: time.Millisecond, Rounds: 1, QD: 1, BS: 3000, Dir: t.TempDir(), FileSize: 1 << 20})
	var bad *OptionError
	if !errors.As(err, &bad) || !strings.Contains(err.Error(), "--bs 3000 B:") {
		t.Errorf("batching --bs 3000: %v; want an option error naming 3000 B", err)
	}

	var out bytes.Buffer
	const bs = 1<<20 + 512
	if err := Batching(&out, BatchingOptions{Duration: 10 * time.Millisecond, Rounds: 1, QD: 1, BS: bs, Dir: t.TempDir(), FileSize: 2 << 20}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "file writes of 1049088 B ") {
		t.Errorf("batching --bs %d printed:\n%s\nwant the size in bytes", bs, out.String())
	}

	o := DefaultFolios
	o.Duration, o.Rounds, o.CacheSize, o.SmallFile, o.SmallSize = 10*time.Millisecond, 1, 8<<20, 256<<10, 3000
	out.Reset()
	if err := Folios(t.Context(), &out, o); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "3000 B overwrites") {
		t.Errorf("folios --small-bs 3000 printed:\n%s\nwant the size in bytes", out.String())
	}
}
