package engine

import (
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// An emu device whose two header slots hold random bytes (a stray dd
// over the file's start), not zeros, lost its zone table as one whose
// slots read as zeros: the superblock copy that starts its first
// metadata zone says it is a zonefold device, not some other file
// (the engine registers it with zns as a DataSignature). Open refuses
// it with ErrLostZoneTable naming the superblock, and the salvage
// copies every synced file whole, from the file as the device left it
// and from a copy of it with every block allocated (cp --sparse=never:
// every zone with data inferred full). It was refused as "not an emu
// device (format=1 overwrites it)": the one way on it named erased the
// data, and fsck --copy-to refused it too.
func TestSalvageGarbageZoneTable(t *testing.T) {
	for _, noHoles := range []bool{false, true} {
		t.Run(fmt.Sprintf("noHoles=%v", noHoles), func(t *testing.T) {
			devName := emuDevice(t, 20, "1M", "")
			e := formatOpen(t, devName, smallConfig())
			path := emuOf(t, e).Path()
			rng := rand.New(rand.NewSource(45))
			want := map[string][]byte{}
			for round := range 3 {
				writeSyncedModel(t, e, rng, want, "big", 0, 1<<20+777)
				for i := range 12 {
					writeSyncedModel(t, e, rng, want, fmt.Sprintf("dir/f%d", i%4), int64(rng.Intn(300))*1000, 1+rng.Intn(30<<10))
				}
				gcThenCheckpoint(t, e, round == 1)
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			garbage := make([]byte, 2*4096) // both slots of 20 zones
			rng.Read(garbage)
			garbage[0] = 'z' // not the emu magic's 'Z'
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.WriteAt(garbage, 0)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				t.Fatal(err)
			}
			if noHoles {
				h44jFillHoles(t, path)
			}
			_, err = zns.Open(devName, zns.Options{})
			if !errors.Is(err, zns.ErrLostZoneTable) || !strings.Contains(err.Error(), "a zonefold superblock starts zone 0") {
				t.Fatalf("Open: %v, want ErrLostZoneTable naming the superblock found", err)
			}
			rep, sink := h44hSalvageLost(t, devName, path)
			h44jAllWhole(t, rep)
			checkCopies(t, sink, want)
		})
	}
}
