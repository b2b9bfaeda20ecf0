package engine

import (
	"github.com/zonefold/zonefold/cache"
	"github.com/zonefold/zonefold/uring"
	"github.com/zonefold/zonefold/writeback"
)

// Stats are the engine's cumulative counters and current gauges.
type Stats struct {
	HostWritten int64 `json:"host_written"` // bytes clients wrote
	HostRead    int64 `json:"host_read"`    // bytes clients read

	DevData    int64 `json:"dev_data"`    // client data appended
	DevHeaders int64 `json:"dev_headers"` // record headers appended
	DevPad     int64 `json:"dev_pad"`     // zone-tail padding appended
	DevMeta    int64 `json:"dev_meta"`    // metadata (log, checkpoints) written
	// DevMeta by what wrote it: checkpoints, and the log's operation
	// records (a block each, or more for a long name) of creates,
	// removes, GC's zone resets and the rest (renames, truncates).
	DevCheckpoint  int64 `json:"dev_checkpoint"`
	DevMetaCreates int64 `json:"dev_meta_creates"`
	DevMetaRemoves int64 `json:"dev_meta_removes"`
	DevMetaResets  int64 `json:"dev_meta_resets"`
	DevMetaOther   int64 `json:"dev_meta_other"`
	// GCHeaders is the part of DevHeaders that GC's records took (their
	// data is GCWritten).
	GCHeaders int64 `json:"gc_headers"`
	// RecordsSplit counts client data records cut short of what
	// writeback had for them by their zone's end: each costs a header
	// (a block) more than one record would.
	RecordsSplit int64 `json:"records_split"`
	DevRead      int64 `json:"dev_read"` // bytes read from the device for clients

	Appends     int64 `json:"appends"`
	ZonesOpened int64 `json:"zones_opened"` // zones placement opened for appends
	// ZonesFilled counts data zones that left the open set full: filled
	// to capacity by appends, sealed by GC (GCSealed) or finished at a
	// file's close (ZonesTailFinished). Not zones an append failed in.
	ZonesFilled int64 `json:"zones_filled"`
	// ZonesShared counts files that mru placement sent to another file's
	// zone for want of one of their own.
	ZonesShared int64 `json:"zones_shared"`
	// ZonesSharedBusy is the part of ZonesShared sent into a zone another
	// file was still writing, their appends interleaved; the rest took a
	// finished file's tail (see placer.choose).
	ZonesSharedBusy int64 `json:"zones_shared_busy"`
	// ZonesTailFinished counts zones finished at a file's close because
	// too little room was left for the next file (Config.FinishTail).
	ZonesTailFinished int64 `json:"zones_tail_finished"`
	AppendErrs        int64 `json:"append_errors"`
	// ZoneFinishErrs counts finishes of retired zones (an append to them
	// failed, or a closed file's short tail) that the device refused;
	// ZonesUnfinished is those it may still count active (a gauge): each
	// takes a zone off placement's open budget until GC resets it.
	ZoneFinishErrs  int64 `json:"zone_finish_errors"`
	ZonesUnfinished int   `json:"zones_unfinished"`
	// ReadErrs counts reads the device failed: each failed with EIO.
	// Neither it nor ChecksumErrs counts readahead's reads (windows, a
	// sequential reader's fill past its request), which fail no reader:
	// a failed read counts once (cache.AheadBacking).
	ReadErrs int64 `json:"read_errors"`
	// ReadRetries counts reads the device failed that were read again,
	// piece by piece and then block by block, before their failure was
	// the reader's (the block layer fails every read it merged with one
	// of a bad block): those that then read are not in ReadErrs.
	ReadRetries int64 `json:"read_retries"`
	// ChecksumErrs counts reads that found a data block (or the header
	// holding its checksum) not as it was written: each failed with EIO.
	ChecksumErrs int64 `json:"checksum_errors"`
	// SumReads counts record headers read for their block checksums
	// (reads the checksum cache did not cover).
	SumReads int64 `json:"sum_reads"`
	// ColdReads counts reads begun without waiting (File.StartRead, the
	// daemon's cold misses of a whole folio); ColdReadsLate those of them
	// the ring's reaper found the cache's file lock held for, finished by
	// the cold-read finisher; ColdReadsAgain those whose file changed
	// while they were read, or whose fill past the request or device
	// read failed, read again the waiting way.
	ColdReads      int64 `json:"cold_reads"`
	ColdReadsLate  int64 `json:"cold_reads_late"`
	ColdReadsAgain int64 `json:"cold_reads_again"`
	Checkpoints    int64 `json:"checkpoints"`
	// Flushes counts device flushes (syncs, durable namespace
	// operations, GC, checkpoints); FlushesJoined the callers that a
	// flush another caller ran served instead (group commit).
	Flushes       int64 `json:"flushes"`
	FlushesJoined int64 `json:"flushes_joined"`

	GCRead    int64 `json:"gc_read"`    // bytes GC read (headers and data)
	GCWritten int64 `json:"gc_written"` // bytes GC relocated
	GCResets  int64 `json:"gc_resets"`  // zones GC reset
	// GCCopied counts the victims whose valid data GC relocated (to reset
	// them); the other resets were of zones that held only garbage.
	// GCWritten per GCCopied is what a victim cost.
	GCCopied int64 `json:"gc_copied"`
	// GCSealed counts open zones GC finished to collect them: the
	// garbage a writer short of space needed sat in zones no append was
	// going to (see collector.sealIdle).
	GCSealed int64 `json:"gc_sealed"`
	GCRuns   int64 `json:"gc_runs"`
	// GCFailed counts GC passes that failed (a device error): the
	// background collector backs off after each (collector.run).
	GCFailed int64 `json:"gc_failed"`
	// GCVictimsFailed counts victim zones whose collection the device
	// failed (a read or copy of its data, its finish, its reset), in
	// passes that failed or went on to reclaim another zone: GC leaves
	// each for a while (victimRetryWait).
	GCVictimsFailed int64 `json:"gc_victims_failed"`
	// GCVictimsChanged counts victims left full for a later pass because
	// a file mapped data into them again while their data was relocated
	// (errVictimChanged): nothing failed or was lost, but a count that
	// keeps rising is GC copying zones it then cannot reset.
	GCVictimsChanged int64 `json:"gc_victims_changed"`
	GCNanos          int64 `json:"gc_nanos"` // time spent in GC passes
	// GCActive is the GC passes relocating or resetting a zone right now
	// (a gauge: 0 or 1), so that a crash test can kill the daemon mid-GC.
	GCActive int64 `json:"gc_active"`

	// OfflineZones is the data zones the engine knows the device
	// reports offline (a gauge): their data no longer reads, and they
	// take no write or reset again. LostBytes is what files map there
	// (reads of it fail; fsck names the files): lost, not garbage GC
	// could reclaim.
	OfflineZones int   `json:"offline_zones"`
	LostBytes    int64 `json:"lost_bytes"`

	FreeZones int `json:"free_zones"`
	OpenZones int `json:"open_zones"`
	// Unwritten is the data zones' bytes not yet written (nor reserved
	// for an append in flight): the free zones and the rest of the open
	// ones. Capacity less it is the space in circulation, valid or not.
	Unwritten  int64 `json:"unwritten"`
	DataZones  int   `json:"data_zones"`
	DirtyBytes int64 `json:"dirty_bytes"`
	// UnnamedFiles is the files removed or renamed over while a handle
	// had them open, kept for their handles until the last of them
	// closes (gauges, as lsof +L1 lists on a kernel file system);
	// UnnamedBytes is their sizes: space no name accounts for.
	UnnamedFiles int   `json:"unnamed_files"`
	UnnamedBytes int64 `json:"unnamed_bytes"`

	Cache     cache.Stats     `json:"cache"`
	Writeback writeback.Stats `json:"writeback"`
	Ring      uring.Stats     `json:"ring"`
}

// DevWritten is every byte written to the device.
func (s Stats) DevWritten() int64 {
	return s.DevData + s.DevHeaders + s.DevPad + s.DevMeta + s.GCWritten
}

// WAF is write amplification: device bytes written per client byte.
func (s Stats) WAF() float64 {
	if s.HostWritten == 0 {
		return 0
	}
	return float64(s.DevWritten()) / float64(s.HostWritten)
}

// Sub is the counters accumulated since an earlier snapshot; gauges keep
// their current values.
func (s Stats) Sub(o Stats) Stats {
	d := s
	d.HostWritten -= o.HostWritten
	d.HostRead -= o.HostRead
	d.DevData -= o.DevData
	d.DevHeaders -= o.DevHeaders
	d.DevPad -= o.DevPad
	d.DevMeta -= o.DevMeta
	d.DevCheckpoint -= o.DevCheckpoint
	d.DevMetaCreates -= o.DevMetaCreates
	d.DevMetaRemoves -= o.DevMetaRemoves
	d.DevMetaResets -= o.DevMetaResets
	d.DevMetaOther -= o.DevMetaOther
	d.GCHeaders -= o.GCHeaders
	d.RecordsSplit -= o.RecordsSplit
	d.DevRead -= o.DevRead
	d.Appends -= o.Appends
	d.ZonesOpened -= o.ZonesOpened
	d.ZonesFilled -= o.ZonesFilled
	d.ZonesShared -= o.ZonesShared
	d.ZonesSharedBusy -= o.ZonesSharedBusy
	d.AppendErrs -= o.AppendErrs
	d.ZoneFinishErrs -= o.ZoneFinishErrs
	d.ReadErrs -= o.ReadErrs
	d.ReadRetries -= o.ReadRetries
	d.ChecksumErrs -= o.ChecksumErrs
	d.SumReads -= o.SumReads
	d.ColdReads -= o.ColdReads
	d.ColdReadsLate -= o.ColdReadsLate
	d.ColdReadsAgain -= o.ColdReadsAgain
	d.Checkpoints -= o.Checkpoints
	d.Flushes -= o.Flushes
	d.FlushesJoined -= o.FlushesJoined
	d.GCRead -= o.GCRead
	d.GCWritten -= o.GCWritten
	d.GCResets -= o.GCResets
	d.GCCopied -= o.GCCopied
	d.GCSealed -= o.GCSealed
	d.GCRuns -= o.GCRuns
	d.GCFailed -= o.GCFailed
	d.GCVictimsFailed -= o.GCVictimsFailed
	d.GCVictimsChanged -= o.GCVictimsChanged
	d.GCNanos -= o.GCNanos
	d.Ring = s.Ring.Sub(o.Ring)
	return d
}

// ZoneValid is one data zone's valid bytes and capacity.
type ZoneValid struct {
	Zone  int   `json:"zone"`
	Valid int64 `json:"valid"`
	Cap   int64 `json:"cap"`
	State string
}

// WritesThrottled says whether a write that starts now waits in the
// cache's dirty throttle (or fails there, if writeback keeps failing).
func (e *Engine) WritesThrottled() bool { return e.cache.Throttling() }

// Stats returns a snapshot.
func (e *Engine) Stats() Stats {
	c := &e.stats
	s := Stats{
		HostWritten: c.hostWritten.Load(), HostRead: c.hostRead.Load(),
		DevData: c.devData.Load(), DevHeaders: c.devHeaders.Load(), DevPad: c.devPad.Load(),
		DevMeta: c.metaWritten.Load(), DevRead: c.devRead.Load(),
		DevCheckpoint: c.ckptWritten.Load(), DevMetaCreates: c.metaOps[opCreate].Load(), DevMetaRemoves: c.metaOps[opRemove].Load(),
		DevMetaResets: c.metaOps[opZoneReset].Load(), DevMetaOther: c.metaOps[opRename].Load() + c.metaOps[opTruncate].Load() + c.metaOps[opVoid].Load(),
		GCHeaders: c.gcHeaders.Load(), RecordsSplit: c.split.Load(),
		Appends: c.appends.Load(), ZonesOpened: e.placer.opened.Load(), ZonesFilled: e.placer.filled.Load(), ZonesShared: e.placer.sharedMRU.Load(), ZonesSharedBusy: e.placer.sharedBusy.Load(), ZonesTailFinished: e.placer.tailsFinished.Load(), AppendErrs: c.appendErrs.Load(), ZoneFinishErrs: c.finishErrs.Load(), ReadErrs: c.readErrs.Load(),
		ReadRetries:  c.readRetries.Load(),
		ChecksumErrs: c.csumErrs.Load(), SumReads: c.sumReads.Load(),
		ColdReads: c.coldReads.Load(), ColdReadsLate: c.coldLate.Load(), ColdReadsAgain: c.coldAgain.Load(),
		Checkpoints: c.checkpoints.Load(), Flushes: e.flushes.flushes.Load(), FlushesJoined: e.flushes.joined.Load(),
		GCRead: c.gcRead.Load(), GCWritten: c.gcWritten.Load(), GCResets: c.gcResets.Load(), GCCopied: c.gcCopied.Load(), GCSealed: c.gcSealed.Load(), GCFailed: c.gcFailed.Load(), GCVictimsFailed: c.gcVictimsFailed.Load(),
		GCVictimsChanged: c.gcVictimsChanged.Load(), GCRuns: c.gcRuns.Load(), GCNanos: c.gcNanos.Load(), GCActive: c.gcActive.Load(),
		DataZones: len(e.placer.zones),
	}
	s.OfflineZones, _, s.LostBytes = e.placer.offlineBytes()
	e.placer.mu.Lock()
	s.FreeZones, s.OpenZones = len(e.placer.free), len(e.placer.open)
	s.ZonesUnfinished = e.placer.unfinished
	s.Unwritten = e.placer.unalloc.Load()
	e.placer.mu.Unlock()
	s.UnnamedFiles, s.UnnamedBytes = e.unnamedFiles()
	if e.cache != nil {
		s.DirtyBytes = e.cache.DirtyBytes()
		s.Cache = e.cache.Stats()
	}
	if e.wb != nil {
		s.Writeback = e.wb.Stats()
	}
	s.Ring = e.ring.Stats()
	return s
}

// unnamedFiles counts the files unnamed while open, and their sizes,
// each sized under its file.mu alone (one dropped meanwhile is not
// counted).
func (e *Engine) unnamedFiles() (n int, size int64) {
	for _, f := range e.unnamedList() {
		f.mu.RLock()
		if !f.gone {
			n++
			size += f.size
		}
		f.mu.RUnlock()
	}
	return n, size
}

// ZoneValidity lists every data zone's valid bytes: the GC histogram.
func (e *Engine) ZoneValidity() []ZoneValid {
	out := make([]ZoneValid, 0, len(e.placer.zones))
	for _, z := range e.placer.zones {
		st := [...]string{"free", "open", "full", "meta", "gc", "retiring"}[z.state.Load()]
		out = append(out, ZoneValid{Zone: z.idx, Valid: z.valid.Load(), Cap: z.cap, State: st})
	}
	return out
}
