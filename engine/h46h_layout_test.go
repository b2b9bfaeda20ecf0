package engine

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
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

// TestH46hFreshLayoutIsTheFormattedEngines: the bench fits check sizes a
// workload with FreshLayout before the format; if any of its parts
// (records' data per header, zone capacity, pads, room) differed from
// what the formatted engine's admission counts, the check would let
// through a workload admission refuses midway, or refuse one it runs.
func TestH46hFreshLayoutIsTheFormattedEngines(t *testing.T) {
	dir := t.TempDir()
	for i, tc := range []struct {
		spec string
		cfg  Config
	}{
		{"emu:%s?zone_size=1M&zones=16", Config{}},
		{"emu:%s?zone_size=1M&zone_cap=768K&zones=16", Config{}},
		{"emu:%s?zone_size=1M&zones=20&conv=3", Config{}},
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
		fresh, err := FreshLayout(dev, tc.cfg)
		if err != nil {
			t.Fatalf("%s: FreshLayout: %v", spec, err)
		}
		e, err := FormatAndOpen(dev, tc.cfg)
		if err != nil {
			t.Fatalf("%s: %v", spec, err)
		}
		if got := e.Layout(); got != fresh || got.Room != e.placer.space() {
			t.Errorf("%s: FreshLayout %+v; the formatted engine's %+v (placer space %d)", spec, fresh, got, e.placer.space())
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
