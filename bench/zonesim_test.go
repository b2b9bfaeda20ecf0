package bench

import (
	"math"
	"math/rand/v2"
	"testing"
)

// zoneSim is a zone-level simulation of the engine's placement and greedy
// GC: zones of cap units, a unit being one write (no record headers, no
// cache, no metadata). It tells what the geometry alone does to WAF
// (open zones each holding a partly written zone, GC's reserve and
// watermarks, GC's streams) apart from what the engine adds.
type zoneSim struct {
	cap     int
	valid   []int     // per zone
	fill    []int     // units written per zone
	owner   [][]int32 // per zone, per slot: the logical unit, or -1
	open    []bool
	free    []int
	loc     []int32 // logical unit -> zone*cap+slot, or -1
	streams []int   // open zone per write stream, or -1
	gc      []int   // open zone per GC stream, or -1
	// gcStream chooses the GC stream of a unit copied (nil: stream 0).
	gcStream func(unit int) int
	// reserve free zones only GC takes; background GC starts below low
	// and stops at high free zones.
	reserve, low, high int
	// hdrEvery: a stream (the writers' or GC's) appends a unit that
	// holds nothing (a record header) after every hdrEvery units of
	// data appended, host writes and GC's copies counted together (0:
	// none).
	hdrEvery           int
	host, copied, dead int64
	written            int // units in zones, valid or not
}

func newZoneSim(zones, capUnits, units, writeStreams, gcStreams, reserve, low, high int) *zoneSim {
	s := &zoneSim{cap: capUnits, valid: make([]int, zones), fill: make([]int, zones),
		owner: make([][]int32, zones), open: make([]bool, zones), loc: make([]int32, units),
		streams: make([]int, writeStreams), gc: make([]int, gcStreams),
		reserve: reserve, low: low, high: high}
	for z := range zones {
		s.owner[z] = make([]int32, capUnits)
		s.free = append(s.free, z)
	}
	for i := range s.loc {
		s.loc[i] = -1
	}
	for i := range s.streams {
		s.streams[i] = -1
	}
	for i := range s.gc {
		s.gc[i] = -1
	}
	return s
}

// kill invalidates a logical unit's old copy.
func (s *zoneSim) kill(unit int) {
	if l := s.loc[unit]; l >= 0 {
		z, slot := int(l)/s.cap, int(l)%s.cap
		s.owner[z][slot] = -1
		s.valid[z]--
		s.loc[unit] = -1
	}
}

// place appends a unit to zone z; unit -1 is one that holds nothing
// (a record header).
func (s *zoneSim) place(z, unit int) {
	slot := s.fill[z]
	s.fill[z]++
	s.written++
	s.owner[z][slot] = int32(unit)
	if unit < 0 {
		s.dead++
		return
	}
	s.valid[z]++
	s.loc[unit] = int32(z*s.cap + slot)
}

// take opens a free zone: writers keep the reserve (collecting while
// they are down to it), GC may take it.
func (s *zoneSim) take(forGC bool) int {
	for !forGC && len(s.free) <= s.reserve {
		if !s.collect(0) {
			panic("zone sim: device full")
		}
	}
	if len(s.free) == 0 {
		panic("zone sim: GC out of zones")
	}
	z := s.free[0]
	s.free = s.free[1:]
	s.open[z] = true
	return z
}

// appendTo appends unit to the open zone of stream st of streams (the
// writers' or GC's), opening a zone when it has none or a full one.
func (s *zoneSim) appendTo(streams []int, st, unit int, forGC bool) {
	z := streams[st]
	if z < 0 || s.fill[z] == s.cap {
		if z >= 0 {
			s.open[z] = false
		}
		z = s.take(forGC)
		streams[st] = z
	}
	s.place(z, unit)
}

// headerDue says whether the data unit just appended ends a record: a
// header unit follows every hdrEvery of them.
func (s *zoneSim) headerDue() bool {
	return s.hdrEvery > 0 && (s.host+s.copied)%int64(s.hdrEvery) == 0
}

// write appends a host write of unit to write stream st.
func (s *zoneSim) write(st, unit int) {
	s.kill(unit)
	s.host++
	s.appendTo(s.streams, st, unit, false)
	if s.headerDue() {
		s.appendTo(s.streams, st, -1, false)
	}
	if len(s.free) < s.low {
		for len(s.free) < s.high && s.collect(16) {
		}
	}
}

// collect reclaims the full zone with the least valid data, if at least
// cap/gainDiv of it is garbage (any garbage for gainDiv 0).
func (s *zoneSim) collect(gainDiv int) bool {
	best := -1
	for z := range s.valid {
		if s.open[z] || s.fill[z] < s.cap || s.cap-s.valid[z] < 1 {
			continue
		}
		if gainDiv > 0 && s.cap-s.valid[z] < s.cap/gainDiv {
			continue
		}
		if best < 0 || s.valid[z] < s.valid[best] {
			best = z
		}
	}
	if best < 0 {
		return false
	}
	s.open[best] = true // not a victim again while it is emptied
	for slot := range s.fill[best] {
		unit := int(s.owner[best][slot])
		if unit < 0 {
			continue
		}
		st := 0
		if s.gcStream != nil {
			st = s.gcStream(unit)
		}
		s.kill(unit)
		s.appendTo(s.gc, st, unit, true)
		s.copied++
		if s.headerDue() {
			s.appendTo(s.gc, st, -1, true)
		}
	}
	s.written -= s.fill[best]
	s.fill[best], s.valid[best], s.open[best] = 0, 0, false
	clear(s.owner[best])
	s.free = append(s.free, best)
	return true
}

// uniformSim fills files units of live data through writeStreams
// streams (unit u of file u%writeStreams... each file its own stream
// under mru), then overwrites at random for warm capacities and measures
// the WAF over measure capacities; it also returns the mean space in
// circulation (zones written, valid or not) at the writes measured, in
// units.
func uniformSim(zones, capUnits, live, writeStreams, gcStreams, reserve, low, high, hdrEvery int, warm, measure float64, seed uint64) (waf, meanUsed, share float64) {
	s := newZoneSim(zones, capUnits, live, writeStreams, gcStreams, reserve, low, high)
	s.hdrEvery = hdrEvery
	rng := rand.New(rand.NewPCG(seed, 1))
	if gcStreams > 1 {
		// Under uniform overwrites no file is hotter than another: the
		// engine's hot/cold split is as good as a coin per file.
		s.gcStream = func(unit int) int { return unit % writeStreams % gcStreams }
	}
	stream := func(unit int) int { return unit % writeStreams }
	for u := range live {
		s.write(stream(u), u)
	}
	total := zones * capUnits
	for range int(warm * float64(total)) {
		u := rng.IntN(live)
		s.write(stream(u), u)
	}
	h0, c0, d0 := s.host, s.copied, s.dead
	var sum float64
	n := int(measure * float64(total))
	for range n {
		u := rng.IntN(live)
		s.write(stream(u), u)
		sum += float64(s.written)
	}
	data := float64(s.host - h0 + s.copied - c0)
	return data / float64(s.host-h0), sum / float64(n), data / (data + float64(s.dead-d0))
}

// TestGreedyModelMatchesZoneSim checks the uniform workload's reference
// line against a zone-level simulation of greedy GC on bench gc's default
// device (248 data zones of 128 writes of 8 KiB, 16 files filled to 80% of
// it, GC's reserve of 3 zones and 2 streams), with writers waiting at the
// reserve as the engine's do: the model at uniformCirculation must be
// within 5% of the simulated WAF, under mru (16 open data zones) and none
// (1), and the space the simulation keeps written within a zone of
// uniformCirculation. The old line (T: all but the watermarks' 6 free
// zones, 2.963) was 8% below the simulated mru WAF (3.23) and 16% below
// the same simulation with GC holding the free zones between the
// watermarks (3.45).
//
// With a record header's worth of zone space that holds nothing after
// every 31 units of data, in the writers' zones and GC's alike (the
// engine's record headers under uniform overwrites once its writers are
// served in turn: 0.124 header bytes per host byte against 3.86 of data
// and GC's copies, a data share of 96.9%), the simulated WAF rises by a
// sixth, and the line must follow it by counting the data's share of the
// zone bytes (uniformLine): left at the whole circulation it fell 13%
// below the simulation, as bench gc's uniform verdict read 22-24% above
// it.
func TestGreedyModelMatchesZoneSim(t *testing.T) {
	const zones, capUnits, files, perFile = 248, 128, 16, 1587
	const reserve, gcStreams = 3, 2
	live := files * perFile
	for _, c := range []struct {
		name           string
		open, hdrEvery int
	}{{"mru", files, 0}, {"none", 1, 0}, {"mru, headers", files, 31}, {"none, headers", 1, 31}} {
		waf, used, share := uniformSim(zones, capUnits, live, c.open, gcStreams, reserve, 0, 0, c.hdrEvery, 2, 4, 1)
		circ := uniformCirculation(zones*capUnits, capUnits, reserve, c.open+gcStreams)
		ref := &uniformRef{Live: int64(live), CircMRU: circ, CircNone: circ, ZoneCap: capUnits, Capacity: zones * capUnits}
		model, _ := uniformLine(ref, share, share)
		whole := greedyWAF(float64(live) / float64(circ))
		t.Logf("%s: simulated WAF %.3f, model %.3f (%+.1f%%) at a data share of %.3f, %.3f (%+.1f%%) at the whole circulation; written %.1f zones, model's T %.1f",
			c.name, waf, model, 100*(model/waf-1), share, whole, 100*(whole/waf-1), used/capUnits, float64(circ)/capUnits)
		if math.Abs(model/waf-1) > 0.05 {
			t.Errorf("%s: model %.3f is %+.1f%% from the simulated greedy WAF %.3f (want within 5%%)", c.name, model, 100*(model/waf-1), waf)
		}
		if c.hdrEvery > 0 && math.Abs(whole/waf-1) <= 0.05 {
			t.Errorf("%s: the line at the whole circulation, %.3f, is within 5%% of the simulated WAF %.3f: the headers should matter here", c.name, whole, waf)
		}
		if math.Abs(used-float64(circ)) > capUnits {
			t.Errorf("%s: the simulation kept %.1f zones written; the model's T is %.1f", c.name, used/capUnits, float64(circ)/capUnits)
		}
	}
}
