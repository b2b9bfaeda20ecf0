package engine

import (
	"bytes"
	"testing"
)

// TestGrowNeverShrinks: Grow extends a shorter file with zeros, durable
// when it returns, and leaves a longer one as it is.
func TestGrowNeverShrinks(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	f := mustCreate(t, e, "a")
	data := bytes.Repeat([]byte{9}, 10000)
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Grow(5000); err != nil || f.Size() != 10000 {
		t.Fatalf("grow to less than the size: %v, size %d, want 10000", err, f.Size())
	}
	// No sync after it: a Grow that extends is durable when it returns.
	if err := f.Grow(20000); err != nil || f.Size() != 20000 {
		t.Fatalf("grow: %v, size %d, want 20000", err, f.Size())
	}
	e = powerCutReopen(t, e, devName, cfg)
	defer e.Close()
	want := append(bytes.Clone(data), make([]byte, 10000)...)
	if got := readAll(t, e, "a"); !bytes.Equal(got, want) {
		t.Fatalf("after a power cut: %d bytes, want %d: the data, then zeros", len(got), len(want))
	}
}
