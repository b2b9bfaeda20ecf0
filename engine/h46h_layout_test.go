package engine

import (
	"math/rand/v2"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// h46hOldRoomFor is roomFor's arithmetic before h46c moved it into
// Layout.Need (main at 7164f1b), for space the placer has.
func h46hOldRoomFor(geo zns.Geometry, zoneCap, pads, space, dirtyFiles, dirty, admitted, n int64) bool {
	need := dirty + admitted + n
	perHeader := min(maxRecordData(geo)/BlockSize, MaxRecordExtents)
	headers := dirtyFiles + need/BlockSize/perHeader + need/zoneCap + pads
	return space >= need+headers*BlockSize
}

// TestH46hRoomForAdmitsWhatItDidBeforeLayout: h46c's roomFor counts
// Layout.Need, "no behaviour change". Admission deciding differently
// would let a write in that later cannot be placed, or refuse one that
// fits; over geometries (max appends from a record's minimum to past
// MaxRecordBlocks, zone capacities from 4 blocks) and counts from 0 to
// near the int64 range's top, the old and new answers agree, and at the
// boundary (space exactly Need) both admit and a byte less both refuse.
func TestH46hRoomForAdmitsWhatItDidBeforeLayout(t *testing.T) {
	r := rand.New(rand.NewPCG(46, 8))
	appends := []int{minRecord, minRecord + 1, 3*BlockSize - 1, 64 << 10, 1 << 20, 4 << 20, 1<<31 - 1}
	caps := []int64{4 * BlockSize, 1 << 20, 768 << 10, 2 << 30}
	pick := func(limit int64) int64 {
		switch r.IntN(4) {
		case 0:
			return r.Int64N(4)
		case 1:
			return r.Int64N(1 << 20)
		case 2:
			return r.Int64N(1 << 40)
		default:
			return r.Int64N(limit)
		}
	}
	for i := range 200000 {
		geo := zns.Geometry{MaxAppend: appends[i%len(appends)]}
		zoneCap := caps[r.IntN(len(caps))]
		l := Layout{perHeader: perHeader(geo), zoneCap: zoneCap, pads: pick(1 << 16)}
		files, dirty, admitted, n := pick(1<<20), pick(1<<55), pick(1<<55), pick(1<<55)
		need := l.Need(files, dirty+admitted+n)
		for _, space := range []int64{pick(1 << 60), need, need - 1, need + 1} {
			old := h46hOldRoomFor(geo, zoneCap, l.pads, space, files, dirty, admitted, n)
			if got := space >= need; got != old {
				t.Fatalf("max append %d, zone %d, pads %d, space %d, files %d, dirty %d+%d+%d: Need admits %v, the old roomFor %v",
					geo.MaxAppend, zoneCap, l.pads, space, files, dirty, admitted, n, got, old)
			}
		}
	}
}
