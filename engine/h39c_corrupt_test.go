package engine

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
)

// TestCorruptionAtRest damages an image at rest, one damage at a time,
// and holds zonefold to its promise about media that returns wrong
// bytes: it never returns wrong data silently, never panics or hangs,
// and either opens with correct data, refuses with an error that says
// what is damaged, or fails reads (EIO) of the damaged file range only.
//
// Two golden images (dmgBuild): one left as a crash leaves it, the log
// after the newest checkpoint still to replay, and one closed cleanly.
// Each region (dmgGolden.layout) is damaged by each kind (a bit flipped,
// the 4 KiB block zeroed, the block overwritten with random bytes) at
// a random place a seed picks; then dmgGolden.run: Fsck, Open, every
// file read back, a write, Close, and a second Open and reads
// (recovery's checkpoint must not have turned damage into wrong bytes).
// Each outcome is classified (dmgOutcome) and counted; the counts are
// logged. FuzzOpenDamagedImage holds fuzzed damage to the same promise.
//
// ZONEFOLD_CORRUPT_SEEDS=FIRST-LAST runs those seeds instead of the
// default two (one with -short or the race detector).
func TestCorruptionAtRest(t *testing.T) {
	dmgQuiet(t)

	seeds := []uint64{1, 2}
	if testing.Short() || raceEnabled {
		seeds = seeds[:1]
	}
	if s := envSeeds(t, "ZONEFOLD_CORRUPT_SEEDS"); s != nil {
		seeds = s
	}
	counts := map[string]int{}
	for _, clean := range []bool{false, true} {
		variant := "crash"
		if clean {
			variant = "clean"
		}
		g := dmgGoldenImage(t, clean)
		for r := range regions {
			if len(g.regions[r]) == 0 {
				t.Logf("%s: region %s is empty in this image", variant, regionNames[r])
				continue
			}
			for k := range carKinds {
				for _, seed := range seeds {
					name := fmt.Sprintf("%s/%s/%s/%d", variant, regionNames[r], carKindNames[k], seed)
					img := carDamage(g, r, k, seed)
					out := dmgOutcome{class: "no change"}
					if !bytes.Equal(img, g.img) {
						out = g.run(t, name, img)
					}
					counts[regionNames[r]+" "+out.class]++
					if out.bad {
						t.Errorf("%s: %s: %s", name, out.class, out.why)
					}
				}
			}
		}
	}
	var keys []string
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %-40s %d", k, counts[k])
	}
	t.Logf("outcomes (region, outcome: count):%s", b.String())
}

// The kinds of damage.
const (
	carFlip  = iota // one bit flipped
	carZero         // the 4 KiB block zeroed
	carNoise        // the 4 KiB block overwritten with random bytes
	carKinds
)

var carKindNames = [carKinds]string{"flip", "zero", "noise"}

// carDamage is a copy of the golden image damaged in region r by kind k
// at a place seed picks.
func carDamage(g *dmgGolden, r, k int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, uint64(r*carKinds+k)<<32|0x39c))
	img := bytes.Clone(g.img)
	at := dmgAt(g.regions[r], rng.Uint64())
	switch k {
	case carFlip:
		img[at] ^= 1 << rng.IntN(8)
	case carZero, carNoise:
		lo := at - at%BlockSize
		hi := min(lo+BlockSize, int64(len(img)))
		if k == carZero {
			clear(img[lo:hi])
		} else {
			for i := lo; i < hi; i++ {
				img[i] = byte(rng.Uint32())
			}
		}
	}
	return img
}
