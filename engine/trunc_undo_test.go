package engine

import (
	"errors"
	"strings"
	"syscall"
	"testing"
)

// TestTruncateFlushEIOThenTornCrashKeepsFile: a truncate whose device
// flush fails returns EIO with the file as it was, on the device too. The
// zeros' record (the new size) was appended before the flush failed, and
// a device may persist it without the records undoCut appends after it
// (a prefix of a zone's unflushed writes, TearLastWrite here): unless
// undoCut's records are flushed before the truncate returns, the file
// came back cut.
func TestTruncateFlushEIOThenTornCrashKeepsFile(t *testing.T) {
	devName, cfg, e, f := fileWithoutGC(t)
	defer func() { e.Close() }()
	want := make([]byte, 10000)
	for i := range want {
		want[i] = byte(i%251 + 1)
	}
	if _, err := f.WriteAt(want, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	emuOf(t, e).FailFlush(1)
	if err := f.Truncate(5000); !errors.Is(err, syscall.EIO) {
		t.Fatalf("truncate: %v", err)
	}
	sameBytes(t, "after the failed truncate", readAll(t, e, "a"), want)
	e.crashForTest()
	emu := emuOf(t, e)
	if err := emu.TearLastWrite(0); err != nil {
		// Refused only because undoCut flushed its records (the fix):
		// then any cut keeps them.
		if !strings.Contains(err.Error(), "was flushed") {
			t.Fatal(err)
		}
		if err := emu.PowerCut(); err != nil {
			t.Fatal(err)
		}
	}
	emu.Close()
	e = reopen(t, devName, cfg)
	sameBytes(t, "after the failed truncate and a crash that kept the zeros' record", readAll(t, e, "a"), want)
}
