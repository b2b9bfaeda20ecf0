package server

import (
	"strconv"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/cache"
	"github.com/zonefold/zonefold/engine"
)

// metric is one exported value read from a stats snapshot.
type metric struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(*engine.Stats) float64
}

func counter(name, help string, f func(*engine.Stats) float64) metric {
	return metric{prometheus.NewDesc("zonefold_"+name, help, nil, nil), prometheus.CounterValue, f}
}

func gauge(name, help string, f func(*engine.Stats) float64) metric {
	return metric{prometheus.NewDesc("zonefold_"+name, help, nil, nil), prometheus.GaugeValue, f}
}

// engineMetrics are the engine, cache, writeback, GC and io_uring
// counters of (*engine.Engine).Stats, one snapshot per scrape.
var engineMetrics = []metric{
	counter("host_written_bytes_total", "Bytes clients wrote.", func(s *engine.Stats) float64 { return float64(s.HostWritten) }),
	counter("host_read_bytes_total", "Bytes clients read.", func(s *engine.Stats) float64 { return float64(s.HostRead) }),
	counter("device_data_bytes_total", "Client data appended to the device.", func(s *engine.Stats) float64 { return float64(s.DevData) }),
	counter("device_header_bytes_total", "Record headers appended to the device.", func(s *engine.Stats) float64 { return float64(s.DevHeaders) }),
	counter("device_pad_bytes_total", "Zone-tail padding appended to the device.", func(s *engine.Stats) float64 { return float64(s.DevPad) }),
	counter("device_meta_bytes_total", "Metadata (log, checkpoints) written to the device.", func(s *engine.Stats) float64 { return float64(s.DevMeta) }),
	counter("device_checkpoint_bytes_total", "Of device_meta_bytes_total, checkpoints.", func(s *engine.Stats) float64 { return float64(s.DevCheckpoint) }),
	counter("device_meta_create_bytes_total", "Of device_meta_bytes_total, the log's records of creates.", func(s *engine.Stats) float64 { return float64(s.DevMetaCreates) }),
	counter("device_meta_remove_bytes_total", "Of device_meta_bytes_total, the log's records of removes.", func(s *engine.Stats) float64 { return float64(s.DevMetaRemoves) }),
	counter("device_meta_reset_bytes_total", "Of device_meta_bytes_total, the log's records of GC's zone resets.", func(s *engine.Stats) float64 { return float64(s.DevMetaResets) }),
	counter("device_meta_other_bytes_total", "Of device_meta_bytes_total, the log's other records (renames, truncates).", func(s *engine.Stats) float64 { return float64(s.DevMetaOther) }),
	counter("gc_header_bytes_total", "Of device_header_bytes_total, the headers of GC's records.", func(s *engine.Stats) float64 { return float64(s.GCHeaders) }),
	counter("records_split_total", "Client records cut short by their zone's end (each costs a header more).", func(s *engine.Stats) float64 { return float64(s.RecordsSplit) }),
	counter("device_read_bytes_total", "Bytes read from the device for clients.", func(s *engine.Stats) float64 { return float64(s.DevRead) }),
	gauge("write_amplification", "Device bytes written per client byte since the daemon started (0 before any client byte); over a window, the rates of the device's byte counters over host_written_bytes_total's give it.", func(s *engine.Stats) float64 { return s.WAF() }),
	counter("appends_total", "Records appended.", func(s *engine.Stats) float64 { return float64(s.Appends) }),
	counter("zones_opened_total", "Zones placement opened for appends.", func(s *engine.Stats) float64 { return float64(s.ZonesOpened) }),
	counter("zones_filled_total", "Data zones that left the open set full (filled, sealed by GC, or finished at a file's close).", func(s *engine.Stats) float64 { return float64(s.ZonesFilled) }),
	counter("zones_shared_total", "Files placement sent to another file's zone for want of one of their own.", func(s *engine.Stats) float64 { return float64(s.ZonesShared) }),
	counter("zones_shared_busy_total", "Of zones_shared_total, those sent into a zone another file was still writing.", func(s *engine.Stats) float64 { return float64(s.ZonesSharedBusy) }),
	counter("zones_tail_finished_total", "Zones finished at a file's close because too little room was left for the next file.", func(s *engine.Stats) float64 { return float64(s.ZonesTailFinished) }),
	counter("zone_finish_errors_total", "Finishes of retired zones the device refused.", func(s *engine.Stats) float64 { return float64(s.ZoneFinishErrs) }),
	gauge("zones_unfinished", "Retired zones the device may still count active (each takes one off the open budget until GC resets it).", func(s *engine.Stats) float64 { return float64(s.ZonesUnfinished) }),
	counter("append_errors_total", "Appends that failed.", func(s *engine.Stats) float64 { return float64(s.AppendErrs) }),
	counter("read_errors_total", "Reads the device failed (EIO to the reader); a failed read counts once, readahead's and a fill past the request's not at all.", func(s *engine.Stats) float64 { return float64(s.ReadErrs) }),
	counter("read_retries_total", "Reads the device failed that were read again piece by piece, then block by block, before failing the reader (a read merged with one of a bad block fails whole); those that then read are not in read_errors_total.", func(s *engine.Stats) float64 { return float64(s.ReadRetries) }),
	counter("checksum_errors_total", "Reads that found data not as it was written (EIO to the reader); a failed read counts once, readahead's and a fill past the request's not at all.", func(s *engine.Stats) float64 { return float64(s.ChecksumErrs) }),
	counter("cold_reads_total", "Cold reads of a whole folio the connection's reader began without a worker, finished as their device reads completed.", func(s *engine.Stats) float64 { return float64(s.ColdReads) }),
	counter("cold_reads_late_total", "Of cold_reads_total, those the ring's reaper found the cache's file lock held for, finished by the cold-read finisher.", func(s *engine.Stats) float64 { return float64(s.ColdReadsLate) }),
	counter("cold_reads_again_total", "Of cold_reads_total, those whose file changed while they were read, or whose fill past the request or device read failed, read again by a worker.", func(s *engine.Stats) float64 { return float64(s.ColdReadsAgain) }),
	counter("checksum_header_reads_total", "Record headers read for their block checksums.", func(s *engine.Stats) float64 { return float64(s.SumReads) }),
	counter("checkpoints_total", "Checkpoints written.", func(s *engine.Stats) float64 { return float64(s.Checkpoints) }),
	counter("flushes_total", "Device flushes (syncs, durable namespace operations, GC, checkpoints).", func(s *engine.Stats) float64 { return float64(s.Flushes) }),
	counter("flushes_joined_total", "Callers a flush another caller ran served instead (group commit).", func(s *engine.Stats) float64 { return float64(s.FlushesJoined) }),
	counter("gc_read_bytes_total", "Bytes GC read.", func(s *engine.Stats) float64 { return float64(s.GCRead) }),
	counter("gc_written_bytes_total", "Bytes GC relocated.", func(s *engine.Stats) float64 { return float64(s.GCWritten) }),
	counter("gc_zone_resets_total", "Zones GC reset.", func(s *engine.Stats) float64 { return float64(s.GCResets) }),
	counter("gc_zones_copied_total", "Victim zones whose valid data GC relocated.", func(s *engine.Stats) float64 { return float64(s.GCCopied) }),
	counter("gc_zones_sealed_total", "Open zones GC finished to collect them.", func(s *engine.Stats) float64 { return float64(s.GCSealed) }),
	counter("gc_runs_total", "GC passes.", func(s *engine.Stats) float64 { return float64(s.GCRuns) }),
	counter("gc_failed_total", "GC passes that failed (a device error).", func(s *engine.Stats) float64 { return float64(s.GCFailed) }),
	counter("gc_victims_failed_total", "Victim zones whose collection the device failed (left for a while; the pass tries others).", func(s *engine.Stats) float64 { return float64(s.GCVictimsFailed) }),
	counter("gc_victims_changed_total", "Victim zones left for a later pass because a file mapped data into them again while they were relocated (nothing failed).", func(s *engine.Stats) float64 { return float64(s.GCVictimsChanged) }),
	counter("gc_seconds_total", "Time spent in GC passes.", func(s *engine.Stats) float64 { return float64(s.GCNanos) / 1e9 }),
	gauge("gc_active", "GC passes relocating or resetting a zone right now (0 or 1).", func(s *engine.Stats) float64 { return float64(s.GCActive) }),
	gauge("offline_zones", "Data zones the device reports offline (their data no longer reads; they take no write or reset).", func(s *engine.Stats) float64 { return float64(s.OfflineZones) }),
	gauge("lost_bytes", "Bytes files map in offline zones: lost, reads of them fail (fsck names the files).", func(s *engine.Stats) float64 { return float64(s.LostBytes) }),
	gauge("free_zones", "Empty data zones.", func(s *engine.Stats) float64 { return float64(s.FreeZones) }),
	gauge("open_zones", "Data zones open for appends.", func(s *engine.Stats) float64 { return float64(s.OpenZones) }),
	gauge("unwritten_bytes", "Data zones' bytes not yet written nor reserved (free zones and the rest of the open ones).", func(s *engine.Stats) float64 { return float64(s.Unwritten) }),
	gauge("data_zones", "Zones of the data area (not metadata), free, open and full alike.", func(s *engine.Stats) float64 { return float64(s.DataZones) }),
	gauge("dirty_bytes", "Dirty bytes in the cache.", func(s *engine.Stats) float64 { return float64(s.DirtyBytes) }),
	gauge("unnamed_files", "Files removed or renamed over while open, kept until their last handle closes.", func(s *engine.Stats) float64 { return float64(s.UnnamedFiles) }),
	gauge("unnamed_bytes", "The sizes of the files removed or renamed over while open.", func(s *engine.Stats) float64 { return float64(s.UnnamedBytes) }),

	gauge("cache_arena_bytes", "Size of the folio arena.", func(s *engine.Stats) float64 { return float64(s.Cache.ArenaBytes) }),
	gauge("cache_cached_bytes", "Arena bytes held by folios.", func(s *engine.Stats) float64 { return float64(s.Cache.CachedBytes) }),
	counter("cache_hits_total", "Folio visits served from the cache.", func(s *engine.Stats) float64 { return float64(s.Cache.Hits) }),
	counter("cache_misses_total", "Folio visits that read the device.", func(s *engine.Stats) float64 { return float64(s.Cache.Misses) }),
	counter("cache_read_throughs_total", "Device reads of partly written blocks.", func(s *engine.Stats) float64 { return float64(s.Cache.ReadThroughs) }),
	counter("cache_evictions_total", "Folios evicted.", func(s *engine.Stats) float64 { return float64(s.Cache.Evictions) }),
	counter("cache_evicted_bytes_total", "Bytes evicted.", func(s *engine.Stats) float64 { return float64(s.Cache.EvictedBytes) }),
	counter("cache_throttles_total", "Writers that waited for dirty bytes to fall.", func(s *engine.Stats) float64 { return float64(s.Cache.Throttles) }),
	counter("cache_throttled_seconds_total", "Time writers spent throttled.", func(s *engine.Stats) float64 { return s.Cache.ThrottledTime.Seconds() }),
	counter("cache_alloc_waits_total", "Writers that waited for memory.", func(s *engine.Stats) float64 { return float64(s.Cache.AllocWaits) }),
	counter("cache_alloc_wait_seconds_total", "Time writers spent waiting for memory.", func(s *engine.Stats) float64 { return s.Cache.AllocWaitTime.Seconds() }),
	counter("cache_stable_waits_total", "Writers that waited for a block under writeback.", func(s *engine.Stats) float64 { return float64(s.Cache.StableWaits) }),
	counter("cache_fill_waits_total", "Cache misses that waited for another access's device read of their blocks.", func(s *engine.Stats) float64 { return float64(s.Cache.FillWaits) }),
	counter("cache_prefetched_bytes_total", "Bytes readahead read in.", func(s *engine.Stats) float64 { return float64(s.Cache.PrefetchedBytes) }),
	counter("cache_pressure_total", "Times the cache kicked writeback: dirty bytes rose past the background level, or a writer was about to wait for dirty bytes or memory.", func(s *engine.Stats) float64 { return float64(s.Cache.Pressure) }),
	counter("cache_writeback_bytes_total", "Bytes whose writeback began.", func(s *engine.Stats) float64 { return float64(s.Cache.WritebackBytes) }),
	counter("cache_writeback_extents_total", "Extents whose writeback began.", func(s *engine.Stats) float64 { return float64(s.Cache.WritebackExtents) }),
	counter("cache_writeback_errors_total", "Writeback extents that failed.", func(s *engine.Stats) float64 { return float64(s.Cache.WritebackErrors) }),

	counter("writeback_flushes_total", "File flushes started.", func(s *engine.Stats) float64 { return float64(s.Writeback.Flushes) }),
	counter("writeback_rounds_total", "Background writeback rounds.", func(s *engine.Stats) float64 { return float64(s.Writeback.Rounds) }),
	counter("writeback_bytes_total", "Bytes written back.", func(s *engine.Stats) float64 { return float64(s.Writeback.Bytes) }),
	counter("writeback_errors_total", "Failed flushes.", func(s *engine.Stats) float64 { return float64(s.Writeback.Errors) }),
	counter("writeback_flush_seconds_total", "Time from submission to completion of flushes.", func(s *engine.Stats) float64 { return float64(s.Writeback.FlushNanos) / 1e9 }),

	counter("uring_sqes_total", "Operations submitted to io_uring.", func(s *engine.Stats) float64 { return float64(s.Ring.SQEs) }),
	counter("uring_submit_enters_total", "io_uring_enter calls that submitted.", func(s *engine.Stats) float64 { return float64(s.Ring.SubmitEnters) }),
	counter("uring_wait_enters_total", "Times the ring's reaper waited for completions (on its eventfd in the netpoller, or in io_uring_enter).", func(s *engine.Stats) float64 { return float64(s.Ring.WaitEnters) }),
	counter("uring_completions_total", "io_uring completions delivered.", func(s *engine.Stats) float64 { return float64(s.Ring.Completions) }),
	counter("uring_stuck_cancels_total", "Cancels the ring's watchdog asked for (an operation the kernel sat on).", func(s *engine.Stats) float64 { return float64(s.Ring.StuckCancels) }),
	counter("uring_stuck_found_total", "Of uring_stuck_cancels_total, work the kernel had not started (submitted again).", func(s *engine.Stats) float64 { return float64(s.Ring.StuckFound) }),
	counter("uring_kernel_cancels_total", "Operations the kernel completed with ECANCELED unasked (submitted again).", func(s *engine.Stats) float64 { return float64(s.Ring.KernelCancels) }),
}

var (
	foliosDesc = prometheus.NewDesc("zonefold_cache_folios", "Live folios by order.", []string{"order"}, nil)
	opsDesc    = prometheus.NewDesc("zonefold_server_requests_total", "Requests served, by operation.", []string{"op"}, nil)
	errsDesc   = prometheus.NewDesc("zonefold_server_errors_total", "Error replies sent (posted on the ring, or written to the socket), by status; a reply dropped with its client (gone, or given up at shutdown) is not counted.", []string{"status"}, nil)
	shmDesc    = prometheus.NewDesc("zonefold_server_shared_memory_bytes", "Shared memory the clients' regions take.", nil, nil)
	srvDescs   = []struct {
		desc  *prometheus.Desc
		kind  prometheus.ValueType
		value func(*serverCounters) float64
	}{
		{prometheus.NewDesc("zonefold_server_connections", "Clients connected.", nil, nil), prometheus.GaugeValue,
			func(c *serverCounters) float64 { return float64(c.active.Load()) }},
		{prometheus.NewDesc("zonefold_server_connections_total", "Clients accepted.", nil, nil), prometheus.CounterValue,
			func(c *serverCounters) float64 { return float64(c.accepted.Load()) }},
		{prometheus.NewDesc("zonefold_server_refused_connections_total", "Clients refused for being over the connection cap or the shared-memory budget.", nil, nil), prometheus.CounterValue,
			func(c *serverCounters) float64 { return float64(c.refused.Load()) }},
		{prometheus.NewDesc("zonefold_server_evicted_connections_total", "Connections closed before their hello because as many newer ones were waiting to say theirs.", nil, nil), prometheus.CounterValue,
			func(c *serverCounters) float64 { return float64(c.evicted.Load()) }},
		{prometheus.NewDesc("zonefold_server_protocol_errors_total", "Connections closed for breaking the protocol.", nil, nil), prometheus.CounterValue,
			func(c *serverCounters) float64 { return float64(c.protocolErrors.Load()) }},
		{prometheus.NewDesc("zonefold_server_malformed_requests_total", "Requests refused by the parser.", nil, nil), prometheus.CounterValue,
			func(c *serverCounters) float64 { return float64(c.rejectedMalformed.Load()) }},
		{prometheus.NewDesc("zonefold_server_canceled_requests_total", "Requests canceled by a vanished client or shutdown.", nil, nil), prometheus.CounterValue,
			func(c *serverCounters) float64 { return float64(c.canceled.Load()) }},
		{prometheus.NewDesc("zonefold_server_request_messages_total", "Request batches received.", nil, nil), prometheus.CounterValue,
			func(c *serverCounters) float64 { return float64(c.msgsIn.Load()) }},
		{prometheus.NewDesc("zonefold_server_reply_messages_total", "Reply batches sent.", nil, nil), prometheus.CounterValue,
			func(c *serverCounters) float64 { return float64(c.msgsOut.Load()) }},
		{prometheus.NewDesc("zonefold_server_requests_received_total", "Requests received (all batches).", nil, nil), prometheus.CounterValue,
			func(c *serverCounters) float64 { return float64(c.requestsIn.Load()) }},
		{prometheus.NewDesc("zonefold_server_replies_sent_total", "Replies sent (all batches).", nil, nil), prometheus.CounterValue,
			func(c *serverCounters) float64 { return float64(c.repliesOut.Load()) }},
		{prometheus.NewDesc("zonefold_server_doorbells_received_total", "Rings: wakeups clients sent a sleeping daemon.", nil, nil), prometheus.CounterValue,
			func(c *serverCounters) float64 { return float64(c.doorbellsIn.Load()) }},
		{prometheus.NewDesc("zonefold_server_doorbells_sent_total", "Rings: wakeups the daemon sent sleeping clients.", nil, nil), prometheus.CounterValue,
			func(c *serverCounters) float64 { return float64(c.doorbellsOut.Load()) }},
		{prometheus.NewDesc("zonefold_server_sleeps_total", "Rings: times a connection's reader slept for requests.", nil, nil), prometheus.CounterValue,
			func(c *serverCounters) float64 { return float64(c.sleeps.Load()) }},
		{prometheus.NewDesc("zonefold_server_reads_cached_total", "Reads a connection's reader answered from the cache itself, without a worker.", nil, nil), prometheus.CounterValue,
			func(c *serverCounters) float64 { return float64(c.readsCached.Load()) }},
		{prometheus.NewDesc("zonefold_server_read_bytes_total", "Bytes read by clients through the daemon.", nil, nil), prometheus.CounterValue,
			func(c *serverCounters) float64 { return float64(c.bytesRead.Load()) }},
		{prometheus.NewDesc("zonefold_server_written_bytes_total", "Bytes written by clients through the daemon.", nil, nil), prometheus.CounterValue,
			func(c *serverCounters) float64 { return float64(c.bytesWritten.Load()) }},
	}
)

// collector exports a Server's engine and its own counters.
type collector struct{ s *Server }

// Collector returns the server's metrics for a Prometheus registry.
func (s *Server) Collector() prometheus.Collector { return collector{s} }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range engineMetrics {
		ch <- m.desc
	}
	for _, m := range srvDescs {
		ch <- m.desc
	}
	ch <- foliosDesc
	ch <- opsDesc
	ch <- errsDesc
	ch <- shmDesc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.e.Stats()
	for _, m := range engineMetrics {
		ch <- prometheus.MustNewConstMetric(m.desc, m.kind, m.value(&st))
	}
	for order := range cache.MaxOrder + 1 {
		ch <- prometheus.MustNewConstMetric(foliosDesc, prometheus.GaugeValue, float64(st.Cache.Folios[order]), strconv.Itoa(order))
	}
	sc := &c.s.stats
	for _, m := range srvDescs {
		ch <- prometheus.MustNewConstMetric(m.desc, m.kind, m.value(sc))
	}
	ch <- prometheus.MustNewConstMetric(shmDesc, prometheus.GaugeValue, float64(c.s.shm.Load()))
	for op := OpNop; op < opLimit; op++ {
		ch <- prometheus.MustNewConstMetric(opsDesc, prometheus.CounterValue, float64(sc.requests[op].Load()), op.String())
	}
	for i := range sc.errors {
		if n := sc.errors[i].Load(); n > 0 {
			label := "other"
			if i > 0 {
				label = unix.ErrnoName(syscall.Errno(i))
			}
			ch <- prometheus.MustNewConstMetric(errsDesc, prometheus.CounterValue, float64(n), label)
		}
	}
}
