// Package engine owns files on zones: the namespace, per-file extent maps,
// zone placement (per-file MRU affinity), self-describing records, reads,
// fsync, garbage collection, metadata and recovery, and the engine's stats.
//
// Invariants:
//
//   - Every append is one record: a header block that names the file, the
//     sequence number and the extents it carries, and holds a CRC32C of
//     each data block, then the data. A record never crosses a zone. The
//     device holds nothing else outside the metadata zones, so GC and
//     recovery need no other index.
//   - Sequence numbers grow with every record and namespace operation.
//     An extent's version is the sequence number of the client write that
//     produced it; relocation keeps the version, so a newer write always
//     wins over an older one, whatever order records are replayed in.
//   - Placement never exceeds the device's open or active zone limits:
//     the engine opens at most its zone budget, and zones are filled to
//     capacity exactly (a header-only pad record closes a zone whose last
//     block cannot hold a record), so the device sees them become full.
//     The one exception: a writer short of space whose GC finds no full
//     zone worth collecting has GC seal an open zone no append is in
//     flight to (its garbage would otherwise wait for appends that may
//     never come): it leaves the open set, counts against the budget
//     until the device has finished it, and is collected (gc.go,
//     sealIdle).
//   - A file's MRU zone (under the hinted policy, its write-life class's
//     stream, hint.go) is read without a global lock; only taking a new
//     zone goes through the placement lock. The hint, a zone's owner and
//     a file's open-handle count are atomics that placement reads without
//     a lock.
//   - A zone an append failed in takes no more appends; once the appends
//     in flight there have landed, the engine finishes it on the device
//     (until then it counts against the open budget), and GC reclaims it.
//     If the device refuses the finish and still counts the zone active,
//     it counts against the budget until GC resets it or a later GC pass
//     finishes it (placer.unfinished, Stats.ZonesUnfinished); recovery
//     applies the same rule to a zone it cannot finish.
//
// # Crash consistency
//
// What is authoritative, modelled on f2fs's checkpoint packs and XFS's
// log tail:
//
//   - Every checkpoint takes a sequence number of its own, above every
//     operation and record it contains and below every one it does not
//     (appends are quiesced while it snapshots). The two metadata halves
//     (k consecutive zones each, k in the superblock, sized at Format so
//     that the largest checkpoint the data zones can call for and a log
//     after it fit one: extents cover distinct blocks, so they are at
//     most the data blocks) hold the last two checkpoints; the valid one with the higher
//     number is the file system as of that number, so no two checkpoints
//     ever tie (a tie, from an older zonefold, is reported by fsck).
//     A record whose checksum holds was written whole: if it does not
//     decode, that is damage, never a torn write. A checkpoint numbered
//     above the one recovery would start from is never passed over for
//     it (the operations logged after it are in its half, and recovery's
//     checkpoint would reset that half): Open fails, and fsck says why
//     (checkUndecoded). Nor is one whose checksum fails when whole
//     records numbered above the one recovery would start from follow
//     it in its half: nothing is logged after a torn record, so that is
//     damage too (checkHiddenLog). Salvage alone goes on past both,
//     read-only, from the older checkpoint, and copies only bytes it
//     verifies against the records (fsck's extent check): that
//     checkpoint's extents in zones reset and reused since are holes,
//     never another file's bytes. In the half recovery starts from, the
//     walk ends at a record whose checksum fails, and what follows is
//     not replayed: whole records there can be failed appends never
//     acknowledged (metaLog.strayFrom), which no byte tells from
//     operations after a damaged one, so damage there loses what was
//     logged after it (a design limit; FuzzOpenDamagedImage allows it).
//     Not silently: a walk that ends below the half's write pointer
//     (which moves only over blocks on the media) on a record that fails
//     its checksum is reported, by Open's log and as damage by fsck
//     (checkCutLog). These looks past a walk's end read a block that
//     fails to read (EIO) as holding no record, and a read of many
//     blocks that fails again block by block (scanBlocks): one bad block
//     fails the whole read, and hid the whole records read with it. A
//     record whose header reads and whose own read fails counts as found
//     (laterMeta): its number was handed out, and what it logged may be
//     lost, so checkHiddenLog refuses on it as on a whole one. A block
//     that fails to read inside a walk (not past its end) fails Open,
//     naming the half, the offset and the medium: what it holds may be
//     acknowledged operations.
//     An extent in it that no record can hold (every
//     one the engine maps lies in one record in one data zone, at a
//     block-aligned offset) is left out, and the rest stands; an
//     operation that does not decode ends its half's log. Both are
//     damage fsck reports (Engine.damage).
//   - A checkpoint is written only after a device flush makes durable
//     every record it maps: a device persists writes to different zones
//     in any order until a flush, and a checkpoint that outlived the data
//     it points at would replace acknowledged mappings with lost bytes.
//   - After the checkpoint, the namespace operations logged with a
//     higher number and the data and GC records with a higher number,
//     replayed in number order, are the rest. A record's extents carry
//     the version of the write that produced them, so replay never puts
//     old bytes over new; data and GC records both carry the file's size.
//     Operations are taken only from the checkpoint's own metadata half:
//     everything logged after a checkpoint goes there, so one in the
//     other half numbered above it was never acknowledged. A half's log
//     fills its zones in order, each to capacity before the next opens,
//     so one metadata zone at most is active; an operation that does not
//     fit even after a checkpoint is ENOSPC, never a write past a zone.
//     An operation whose record write fails is logged again in the
//     other half after a checkpoint, under a number above it (writeOp):
//     the failed record, whole, torn or absent, is never replayed.
//     If that fails too (ErrMetaLog), the record may still stand in
//     the log, and any device flush can make it durable: nothing is
//     acknowledged as durable (fsync, Engine.Sync, SyncNamespace, a
//     create's flush, any logged operation) until a checkpoint in the
//     other half supersedes it (metaLog.stray, settleStray), so a
//     failed operation may come back after a crash only if nothing was
//     acknowledged after it. An acknowledging flush settles before it
//     flushes and again after (flushAcked): an operation that failed in
//     between left a record the flush made durable. GC's flushes (its
//     relocation's, its logged resets') may make a stray record durable
//     too; they acknowledge nothing, and every ack after them settles
//     first. When the other half refuses its reset (a
//     zone gone read-only), the checkpoint goes into the active half's
//     own log instead, at the device's write pointer, if the log reads
//     whole up to it (supersedeStrayInHalf: by the failed switch, a
//     settle, or Close). A settle is a half switch: it keeps to the
//     switches' backoff and counts as a failed one. If the log reads
//     whole only up to where the first failed record begins (it landed
//     unreadable), recovery never replays it: the stray is cleared with
//     no checkpoint, and the half's log has ended (metaLog.strayFrom).
//     A failed record that reads whole behind an unreadable end stays
//     unsuperseded until the other half takes its reset, and every
//     ack fails with ErrMetaLog meanwhile.
//   - A number on the device is never handed out again: recovery counts
//     every record header it finds, a torn record's too. Lost writes
//     stay lost because the device reads what it never wrote (past a
//     write pointer, or in the unwritten rest of a finished zone) as
//     zeros, as ZNS devices do and the emulator does: bytes of a write
//     lost to a power cut, shown later, would carry numbers handed out
//     again since.
//   - A GC record takes its number, and checks that its file still maps
//     each piece it carries, in one hold of the file's lock: an overwrite,
//     remove or rename over the file either came first (the piece is left
//     out) or is numbered after it and replays after it. A truncate waits
//     for the pass (it holds the collector from its cut to its log
//     record), and the same check would leave its cut bytes out.
//   - A data zone's write pointer in the checkpoint says where newer
//     records start. A zone is reset only after something durable says
//     it is empty: GC logs the reset (an operation numbered above its
//     relocation records, which are flushed first) and marks the zone so
//     that a checkpoint taken before the reset records it at 0; recovery
//     writes the checkpoint that records its dead zones at 0 before it
//     resets any of them (f2fs reuses a segment only after the checkpoint
//     that frees it). A recovery from an older checkpoint therefore scans
//     such a zone from its start, and one from a newer checkpoint finds
//     only records older than itself there. A device write pointer below
//     the checkpoint's also means a reset since, and the zone is scanned
//     from its start.
//   - A data zone the device reports offline (its data no longer reads,
//     nor its write pointer) is not scanned. That is sound only where
//     nothing newer than the checkpoint can lie in it: the checkpoint
//     had it allocated to its capacity (full, or given up after a
//     failed append) and no reset of it is logged since
//     (offlineZoneNews); otherwise Open fails (ErrZoneOffline) rather
//     than serve older bytes where acknowledged ones were, unless the
//     user opts in to exactly that (Config.AcceptOfflineZones,
//     --accept-offline-zones, which the refusal names): the zone is
//     then taken as offline and its records newer than the checkpoint
//     as never written. Namespace operations are the metadata log's
//     and replay; what those records wrote is absent (a range reads as
//     the checkpoint has it, a file is shorter), which the user chose
//     over losing every file. A GC copy lost there would leave its
//     file mapped into the victim, whose reset is logged: replaying
//     the reset maps what is still there into the accepted zones'
//     room past their checkpoint instead (loseRelocated), so it is lost
//     as the zone's own data is (reads fail, LostBytes counts it, fsck
//     names the file there), not counted live in a zone reset since.
//     The lost records' numbers may be handed out again:
//     harmless, as nothing reads an offline zone again (a zone does
//     not come back from offline), and recovery's checkpoint records
//     it at its capacity, so no later recovery scans it. Reads of
//     what files map there fail. Every checkpoint records a zone the
//     device reports offline at its capacity (it takes no record
//     again, Engine.offlineZones): one checkpoint taken after a zone
//     went offline, a clean Close's or a recovery's, lets every later
//     Open skip it. So the engine owes one from the moment it finds a
//     zone offline (a failed read or finish kicks the offline watcher,
//     which asks the device, at most once per offlineReportEvery: kicks
//     meanwhile are owed one report): the watcher takes it at once, and every
//     acknowledging flush settles it first (Engine.offlineOwed), so a
//     crash after the engine knew does not refuse the next Open. What
//     the cache still holds of what files map there is made dirty again
//     first (cache.Redirty) and written elsewhere by writeback: the
//     cache holds the file's bytes, and a later fsync that succeeds
//     covers them; reads of the rest fail, as fsck says. That includes
//     blocks still under the writeback that put them there (Redirty
//     marks them to go out again) and records the completer maps there
//     only after the watcher listed the zone (it asks for another pass,
//     Engine.offlineLate). A zone goes
//     offline without the engine knowing until it reads, writes or
//     finishes there: a crash before then still refuses. A zone
//     found offline leaves placement (placer.takeOffline: off the free
//     list, or an open one given up), so no append goes there. GC never
//     takes an offline zone (zone.offline): nothing in it reads for a
//     copy, and the device refuses its reset; it stays full for good,
//     and what files map there is lost (Stats.LostBytes), neither
//     valid data nor garbage GC owes.
//   - A torn record (one that runs past the write pointer) ends its
//     zone's log; recovery finishes the zone. Its unwritten tail is not
//     damage. A header wholly below the write pointer that fails its
//     checksum was written whole (the write pointer moves only over
//     blocks on the media), unless an append failed there: every flush
//     after the engine learns of a failed append comes after a
//     checkpoint or after voids of the failed records in the log, so
//     with no void above the checkpoint it is damage in a record newer
//     than it, which no mapping places (its file would read older
//     bytes, the records after it would be lost) — except where the
//     block does not start as such a header (magic, file system, a
//     number above the checkpoint; a bit flipped at rest keeps them): an
//     append whose failure reached the engine only after a flush that
//     began while it was in flight (its settle saw no failure; the emu's
//     flush claims writes in flight) leaves that too, and the appends in
//     flight with it may follow it, acknowledged by that flush; so
//     recovery goes on at the zone's next whole record numbered above
//     the checkpoint (none: its log ends there), and reports the block
//     as possible damage (a design limit, as a cut metadata log's).
//     Else Open refuses, naming the zone, and fsck says so
//     (damagedHeader), unless the user accepts losing that record
//     (Config.AcceptDamagedRecords, --accept-damaged-records, which the
//     refusal names): recovery then goes on at the zone's next whole
//     record. With a void above the checkpoint a block of zeros, or a
//     header a void names, may be a failed append's range: the zone's
//     log ends there if no whole record numbered above the checkpoint
//     follows it, and else goes on at that record (zeros reported as
//     without a void: the appends in flight with a failed one may
//     follow it, fsynced, its void logged later; ending the log lost
//     them silently); any other block (voidedOrNoHeader: bits
//     flipped at rest in a newer record's header, which ending the log
//     lost silently) is judged as without a void. An all-zero block ending a full zone is its
//     unwritten rest, not damage. A data block that fails
//     its checksum below the write pointer was written whole and changed
//     since: recovery replays its record all the same and goes on, so the
//     records behind it are not lost and reads of it fail. So does a
//     record whose data fails to read (EIO) while its header reads; fsck
//     reports a mapped block of either kind. A header that fails to read
//     (EIO, twice) ends its zone's log as a torn record does if the zone
//     is full and no record of ours follows it there (the range of an
//     append that failed on bad media, the zone finished past it);
//     otherwise Open fails (unreadableHeader): the unreadable record was
//     written, may be acknowledged, and cannot be replayed. GC's header walk stops at
//     such a header too, and takes what the maps still point into the
//     zone from them.
//   - fsync (File.Sync) returns after the file's records are appended and
//     the device flushed: they, their data and the file's size survive a
//     crash. Concurrent flushes are merged (flush.go, group commit): a
//     caller waits for a flush whose coverage was decided after its data
//     landed: one that started after, or (on a device that takes a cut,
//     zns.CutFlusher) one already running whose cut is not yet taken,
//     never one whose cut was taken before. An
//     fsync needs a flush that covers the file's latest record and the
//     latest namespace operation logged (its create, grow or rename, and
//     any file's deferred create or remove): if one that succeeded does
//     already, it flushes nothing (Engine.syncTicket), but still writes
//     back what is dirty, reports its handle's errors and settles a
//     failed operation's record first.
//     A write that fails at writeback (EIO, ENOSPC) stays dirty in the
//     cache, and the next fsync of each handle of the file open when it
//     failed (or opened before any reported it) reports the error, once
//     per handle, as Linux's errseq does for each file descriptor
//     (File.errSeen, writeback.FlushFileSeen; a failed truncate of the
//     handle reports it too): so does every fsync of it that was waiting
//     for the failed writeback, and Engine.Sync if the failure came
//     during it, which leaves the file's fsync its error all the same
//     (package writeback). A later fsync writes the data again and
//     succeeds only once it is on the device. A namespace operation (create, remove, rename, truncate) is
//     durable when it returns: its log record is flushed first (after
//     it has released nsMu, or the collector for a truncate, so that
//     concurrent ones share a flush: see the lock order; an OCreate that
//     finds the file still waiting for the flush of its create, or of the
//     rename that gave it the name, waits for it too) — except
//     a create with ODeferSync and RemoveDeferred, whose records are
//     durable from the device's next flush (any Sync, SyncNamespace, a
//     durable operation, GC's logged reset, which precedes every reset
//     of a data zone). A truncate to a size inside a block first writes
//     the file's dirty data back, then the block's tail as zeros (unless
//     it reads as zeros already), in the one record that carries the new
//     size. Nothing numbered before that record carries the new size: a
//     GC record or checkpoint taken before it takes its number carries
//     the old one (file.carriedSize), else a crash that lost the zeros
//     would bring the file back cut over the block's old bytes, and a
//     later grow would show them. From its number until it completes,
//     GC leaves the file's data where it is (file.tailUnsettled): a GC
//     record numbered then would carry the new size, and GC's flush
//     cannot cover a record not yet submitted or still in flight.
//     Checkpoints quiesce appends and wait for those in flight, so they
//     never see that window. If either write fails (EIO), the truncate
//     returns the error with the file as it was, in memory and on the
//     device (File.zeroTail): the zeros' record may be on the device all
//     the same, so the bytes it replaced and all the file maps past its
//     size are appended again, in records numbered after it that carry
//     no size (File.undoCut, file.recordSize), the device is flushed,
//     and only then is the tail's old bytes' record written under the
//     old size, the one record that commits the undo: recovery holds a
//     sizeless record's extents back until a later record of its file
//     carries a size, and drops them if none does (Engine.replayRecord),
//     so a flush from elsewhere amid the undo, then a crash, brings back
//     the truncated file or the old one, never the old size with the
//     cut range part zeros. The device is flushed again before the
//     truncate returns (a device may persist the zeros' record, an
//     earlier write, without the commit). The commit is owed
//     (file.undo) from the moment the old size is back until it is
//     durable, past the truncate if the undo fails too (a failed flush):
//     meanwhile every record of the file carries no size, and nothing
//     else of the file that recovery replays may set one either (a
//     failed extending write logs none, File.keepSize): it would commit
//     the held records whether or not the undo is complete. What they
//     replace, which a crash before the commit maps again, stays
//     counted valid (undoState.replaced), and a retry rewrites only the
//     pieces that failed. The
//     file's next fsync, truncate, write or Engine.Sync writes the
//     commit first (File.settleUndo), or fails; a flush without it would
//     make the held records durable for recovery to drop under the
//     zeros' size, and writes that never waited for it filled a healthy
//     device while GC left the file's zones alone. Only the fsync
//     takes the file's writeback error on the way; a truncate, a write,
//     Engine.Sync and the settler leave it for the fsync, as above
//     (writeback.FlushFileLeaveError). A background goroutine tries it too, with backoff, and at
//     once for a writer short of space (Engine.settleLater,
//     waitSettled); a checkpoint is the commit (its map is the whole
//     file, and nothing before it is replayed), so a durable one ends
//     the state (Engine.endOwed). An undo whose rewrite finds no room
//     (a cut range larger than the free room, which it needs again
//     while what it replaces stays counted valid) writes one instead of
//     failing every retry (File.commitByCheckpoint). GC leaves the file alone
//     until then too: a GC record with a size would commit the held
//     records before they are durable (with the old size, replayed
//     after the zeros' record, it brought back the old size with holes
//     past the block), and a zone holding what they replaced must not
//     be reset.
//     The old size, the block's old bytes in the cache and its old
//     mapping (file.tailOld, kept from the truncate's start and pinned
//     where it is: GC leaves the zone that holds it alone)
//     come back at once, under the cache's lock of the file
//     (cache.WriteThen): writeback takes the zeros (dirty again if
//     their write failed) before, under the new size, or the old bytes
//     after, under the old one, and a checkpoint never saves the old
//     size over the zeros. Either, durable before undoCut's records,
//     brought the file back at its old size with zeros over fsynced
//     bytes. Nothing
//     else is promised for unsynced data, except that what survives of it
//     is whole 4 KiB blocks of some write.
//   - A GC pass reports progress only for a zone it reset, and relocates
//     only when the copy and its headers take less than the reset frees;
//     a writer short of space runs passes itself and gets ENOSPC when
//     none can gain a thirty-second of a zone (admitGain: near full, a
//     pass that freed a few blocks of a zone copied the rest of it for
//     each write). Writeback of data already admitted runs such a pass
//     too, then takes room in a zone GC opened (which admission counts
//     while GC's reserve is whole: the room of a zone GC took from its
//     reserve is the reserve's until GC's resets refill it, even while
//     GC has nothing to collect, since a remove may give it a victim
//     later; so is the part of the reserve GC has filled, which a pass
//     sealing a client zone takes back: placer.space; a write refused
//     meanwhile says how much room GC's zones hold, reserveTaken),
//     and only then a pass of any gain: had it run those first, their
//     gain, left in GC's zone, was room admission counted again, and
//     no write was ever refused. If the device failed the writer's
//     last pass (EIO), the writer, or the fsync of data writeback could
//     not place, gets that error, wrapped, not ENOSPC: the device is
//     failing, not full.
//     Full zones with nothing valid in them go first, all in one pass,
//     their logged resets under one flush.
//
// # Checked reads
//
// Reads check what they read, as btrfs and ZFS do. Every extent names its
// record's header, which holds the CRC32C of each data block, and a cache
// fill checks every block it reads against its sum: a block that fails is
// EIO to the reader and counted (Stats.ChecksumErrs), and the cache keeps
// nothing of it. The sums stay on the device next to their data rather
// than all in memory, where they would cost 4 bytes per 4 KiB of live data
// in memory and in every checkpoint (4 GiB for 4 TiB); a cache of the
// sums of recently read records (88 bytes per 64 KiB of data, 1/64 of the
// folio cache's size by default, keyed by header offset and the zone's
// reset generation) spares most reads the header: a fill whose sums it
// lacks reads the header in the same batch as the data. GC moves blocks with the
// sums they were written with, never new ones, so a block that went bad
// stays detectably bad wherever it moves; fsck reports a mapped block
// that fails as damage.
//
// A fill whose device read fails is read again, piece by piece and then
// block by block, before the failure is the reader's (readPieces; the
// daemon's StartRead hands such a read back to be read so): the block
// layer fails every read it merged with one of a bad block, a
// readahead worker's say, so only a block that fails on its own is EIO.
//
// # Lock order
//
// Locks are taken in this order, outermost first; a lock may be held
// while taking any lock below it, never one above it. Locks marked leaf
// are held only for memory updates: nothing is taken under them and
// nothing waits while holding them.
//
//  1. file.wmu (per file): orders changes of a file's bytes and size.
//     Shared by writes within the size; exclusive for a write that extends
//     the file and for Truncate, held across the write's admission (a
//     GC pass, writeback of every file: see admit), the cache write,
//     writeback of the file (FlushFile) and the truncate's log record
//     and its flush (no write of the file begins before the truncate
//     is durable). Nothing below
//     the cache takes it, so waiting for writeback under it is safe.
//     An fsync (File.Sync, Engine.Sync, holding no other lock; it gives
//     up the wait when its context ends), a write within the size
//     (holding no lock) and the background settler (Engine.settleLater,
//     holding no lock) take it exclusive only to write the commit a failed truncate's undo owes (File.settleUndo),
//     one file at a time. A writer short of space may wait for the
//     settler's try on another file (waitSettled, bounded), never on its
//     own, whose wmu it holds.
//  2. collector.mu: one GC pass. A pass holds it across device I/O, its
//     relocation appends (quiesce shared), the zone reset's log record
//     (nsMu shared, metaLog.mu) and the wait for the victim's readers (a
//     victim with appends in flight is skipped, not waited for). Truncate
//     holds it (under wmu) from cutting the extent map until the
//     truncate's log record has landed, so no pass resets a zone the cut
//     emptied before the cut is durable: a pass logs its reset after that
//     record and resets only once a flush begun after its own record has
//     succeeded (collector.settle), which covers the truncate's too. The
//     truncate's flush runs without it (cutAndLog), shared with others. Writers short of space run a pass themselves (admit,
//     and WriteExtents, which drops quiesce first), possibly under wmu;
//     so does a writer of a file that wants a zone of its own while none
//     is free (WriteExtents' freeZone, quiesce dropped too). Such a pass
//     first asks, under collector.mu, whether it is still needed, and
//     a writer being admitted reserves its room there, before its pass
//     and after its pass if it reclaimed a zone (reclaimTake: the room
//     a pass made is the writer's that ran it): that takes placer.mu or
//     reads atomics only. A pass never waits for a
//     truncate's tail: a victim holding data of a file whose zeros'
//     record is numbered and not complete (or whose failed truncate is
//     being undone) is skipped and left for a later pass, as a victim
//     with appends in flight is; the truncate settles it without the
//     collector (its record's completion, or the end of zeroTail).
//     A writer being admitted whose pass skipped a victim so waits for
//     that file's window to end (admitTails, waitSettled: bounded, with
//     its context), after the pass, holding no engine lock but its own
//     file's wmu; a truncate's undo admits its rewrites without waiting,
//     since the window may be its own.
//     collector.mu also guards each zone's barren mark (zone.barrenValid,
//     barrenAlloc, barrenGen) and short mark (shortValid, shortAlloc,
//     shortGen, shortGain), which passes set and pick reads: a zone a
//     pass found not worth collecting (or worth less than it asked) is
//     skipped (by passes asking as much) until it loses valid data,
//     takes appends or is reset. A writer's pass that finds no full
//     victim may seal an idle open zone (sealIdle): with collector.mu
//     alone it walks the zone's headers while the zone stays open (and
//     in the free space), then takes placer.mu briefly to take it out
//     of the open set, only if collecting it gains space and it took no
//     append since (a zone with a reservation announced is skipped,
//     never waited for), then, with collector.mu alone again, the
//     zone's finish on the device and the collection.
//     It also guards each zone's finish backoff (zone.finishRetry,
//     finishBackoff): a pass asks the device again to finish the
//     unfinished zones due (retryFinish), listing them under placer.mu
//     and finishing them with collector.mu alone.
//  3. Engine.nsMu: the namespace. Held (exclusive for create, remove,
//     rename, and the drop of a file unnamed while open at its last
//     close, dropUnnamed, which File.Close takes holding nothing; shared
//     for truncate and GC's zone reset) across the
//     operation's log record, so across metaLog.mu, a checkpoint and
//     device I/O, not across the record's flush: every operation waits
//     for that without it (logOpRecord, awaitOp), so concurrent durable
//     operations share one flush (group commit), and a durable create
//     that finds a name whose create or rename is still flushing waits
//     for that flush (file.createFlush). An operation is so seen before
//     it is durable, as on a kernel file system before its directory's
//     fsync, but anything durable that a client does after seeing it is
//     logged after it or flushes after its record landed, and recovery
//     replays the log in order: never a later operation without it. The
//     one exception, setting a file's size after a failed write
//     (keepSize), holds it shared across its flush (appendOp).
//     A deferred create or remove (and the remove of a file unnamed at
//     its last close) on a device of format 3 is numbered and applied
//     under it, but its record is held (metaLog.pend, under
//     metaLog.mu) and written later in one pack with the ones held
//     after it: by the next operation logged that is not held (under
//     that one's nsMu), or by an acknowledging flush (flushAcked,
//     landPending), which takes nsMu shared and then metaLog.mu, as
//     settleStray does, before its flush; a checkpoint holds them.
//     An fsync, Engine.Sync, SyncNamespace or an operation waiting for
//     its flush takes it shared, holding no other lock, only while the log
//     holds a failed operation's record, or an append failed, and owes
//     the checkpoint that supersedes it (settleStray); so do the other
//     device flushes, which would make that record as durable
//     (settledFlush): a GC pass's (holding collector.mu) and a
//     truncate's or its undo's (holding wmu). A durable remove, rename or truncate, holding it
//     already, settles under it before it logs its record (logOpRecord).
//     Opening an existing file takes it shared. Close takes it only
//     once it has stopped waiting for running operations, exclusive,
//     around its last checkpoint. It is never held while
//     taking a cache lock: Remove and
//     Rename drop a file's cached data (cache.Forget) after releasing it,
//     because a cold read may hold the cache's file lock while
//     ReadBacking looks the file up.
//  4. metaLog.mu: the metadata log and the operations held for a pack
//     (metaLog.pend); held across its writes (an
//     operation's flush comes after it is released) and across a
//     checkpoint, which takes quiesce exclusively and file.mu
//     shared (the snapshot), resets the next half, finishes the old
//     half's active zone and writes the next half (device I/O, no engine
//     lock taken).
//  5. Engine.quiesce: shared while appends are built (WriteExtents, GC's
//     relocation), exclusive for a checkpoint, which then waits for every
//     append in flight to complete. Under it: file.mu shared, placer.mu,
//     and waits for free ops, header blocks and draining zones, which
//     completions release (and the retirer, once it has finished a zone
//     an append failed in), and for a draining zone GC sealed, which GC
//     releases without taking quiesce: finished on the device
//     (finishSealed) or given back to the open set (unseal), each of
//     which wakes the waiters (Engine.idle) as a completion does.
//  6. The cache's locks, in the order cache/cache.go gives (a file's lock,
//     then the LRU, dirty-list and folio state locks, then the buddy
//     allocator's). A cache file lock may be held while the cache calls
//     ReadBacking (a partial write's fill, a miss that raced a change;
//     most misses call it unlocked), which takes idMu and file.mu shared
//     and waits for device reads, and is held while a failed truncate's WriteThen callback takes
//     file.mu to put the old size back (File.zeroTail). Never held together with collector.mu, nsMu, metaLog.mu or
//     quiesce, in either order.
//  7. file.mu (per file; leaf): size and a truncate's pending tail
//     (tailPending, tailFrom, tailSeq, tailOld), a failed truncate's
//     owed undo (undo), name, the extent map,
//     gone. A
//     data record, like a GC record, takes its sequence number under it;
//     the completer clears the pending tail under it when the zeros'
//     record completes. A leaf but for the cache's file table lock
//     (itself a leaf), which the file's first access takes under it to
//     make the file's cache state only while the file is not gone
//     (Engine.cacheFile).
//  8. placer.mu (leaf): the free, open and draining zone lists. Under
//     it placement may kick the background collector (placer.lowFree): a
//     send on a buffered channel that never waits.
//  9. Engine.idMu (leaf): file lookup by id, for paths below the cache,
//     and Engine.Sync's list of the files (each file.mu is taken after
//     it is released).
//  10. flushGroup.mu (leaf): the group flush's counters; the device flush
//     itself runs without it, and its waiters wait without it.
//  11. Engine.failedMu (leaf): the numbers of the records whose appends
//     failed since the last checkpoint; the completer adds to them, a
//     checkpoint (under metaLog.mu) reads and clears them.
//  12. readahead.mu (per handle; leaf): a handle's sequential-stream
//     state (readahead.go). A read takes it before the cache and never
//     waits under it: a full readahead queue drops the window.
//
// Below all of these: writeback's error map lock and internal/wake's lock
// (leaves), the ring's submission lock, and the device backends' locks (a
// zone's lock, the emulated device's table lock), which are taken under
// any engine lock and take no engine lock. The retirer, which finishes
// zones whose appends failed, and the completer hold no engine lock but
// file.mu and placer.mu, briefly (the completer kicks the offline
// watcher, a send that never waits, when it maps a record into a zone
// already found offline). The offline watcher (offline.go) takes
// placer.mu alone (placer.takeOffline), lists files under idMu, then
// each file's extents under its file.mu,
// releasing each before it takes the cache's lock of the file
// (cache.Redirty); its checkpoint is settleStray's, holding nothing
// else, as an fsync's.
//
// Completions. The ring's reaper delivers a completion to the device
// backend, which updates its zone under the zone's lock and calls the
// engine's Appended; Appended only hands the append to the completer
// goroutine over a channel with room for every append, so the reaper
// never waits on an engine lock and allocates nothing. The completer maps
// the record (file.mu exclusive) and, for a failed append, retires its
// zone (placer.mu), then signals waiters. Because the completer and the
// reaper are what every wait for I/O ends on, file.mu and placer.mu are
// never held across I/O or any wait, and no device backend waits for a
// completion while holding a lock that completion needs (NVMe resyncs a
// zone under its lock only with no write to it in flight; the emulated
// device's Flush waits for writes under its table lock, which their
// completions do not take).
//
// Cold reads begun without waiting (File.StartRead, the daemon's reader
// for a whole missing folio): the reader submits the device reads (its
// own and its batch's under one plug, PlugReads) and returns; the last
// completion finishes the read on the reaper, which unpins the zones,
// checks the blocks (the sum cache's set locks, leaves), tries the
// cache's file lock to make the folio (cache.FinishMiss, which takes
// only the cache's locks below it) and hands the result to the caller's
// ReadDone, which must not block either. The reaper only tries that
// lock: one held (by an access that may itself wait for device reads)
// sends the read to the cold-read finisher goroutine over a channel with
// room for every cold read (each holds one of the readScratches), and
// the finisher waits for the lock; no holder of a cache file lock waits
// for a fill (cache: such waits are made without it), and one that fills
// under it (the cache's memory short) waits only for a scratch of the
// waiting reads' pool, which cold reads never hold, so it gets it. A
// read whose range changed meanwhile (a write, a truncate, a removal,
// a racing shrink) tells ReadDone to read again the waiting way; the
// read holds an operation (enter) from start to end, so Close waits
// for it like any other; a Close that stops waiting (its context done)
// leaves the finisher running, so that a read the device answers later
// still ends (its ReadDone told).
//
// Waits. Besides locks, goroutines wait for appends and reads to complete
// (in-flight counts, a zone's writers and readers, free ops and header
// blocks), which needs only the above, and for writeback to end (cache
// stable pages, throttling, WaitWriteback), which also needs the goroutine
// that started the flush to finish WriteExtents: that may wait for
// quiesce, collector.mu, nsMu and metaLog.mu. So nothing waits for
// writeback while holding quiesce, collector.mu, nsMu, metaLog.mu, or a
// leaf. Every wait for a completion first submits what the ring holds: the
// operation may be queued under someone's plug. That covers only what was
// queued before the wait began, so the converse holds too: a plug holder
// (WriteExtents under writeback's plug) submits what the ring holds before
// it blocks on anything else — before it asks GC for space (collector.mu)
// and before it waits for quiesce behind a checkpoint — because what it
// queued (a pad that a draining zone waits for) may be what the holder of
// that lock waits for. No wait polls: counters
// that fall to zero signal Engine.idle, and waitUntil parks on it.
//
// Closing. Every operation a caller starts (open, create, read, write,
// fsync, truncate, rename, remove, Sync, SyncNamespace) is counted in
// Engine.active (enter, leave: atomics, no lock) and fails with ErrClosed
// once Close has set the closing bit there, which it does first, under
// no lock: an operation may hold nsMu or collector.mu across device I/O
// (a durable remove's flush, a writer's GC pass) that never ends, and
// Close must still refuse new operations and return. One admitted before
// the bit is counted and waited for; none starts after. Close then wakes, holding no lock, every wait that
// depends on the writeback it is about to stop: the cache's throttle and
// its waits for memory (cache.Shut), admission's GC loop and its wait for
// a truncate's window (Engine.closingCh); they return ErrClosed, holding
// whatever the operation holds, which it releases as it returns. It waits
// for the count to fall to zero (Engine.idle, no lock held: what remains
// ends with device I/O already submitted, and writeback, GC and the
// completer still run), bounded by its context, and only then writes
// everything back, checkpoints and closes the cache and the device. That
// writeback, flush and checkpoint run in a goroutine Close waits for
// until its context is done and then at most closeAbandonWait more (a
// device that stops answering with no operation running); if they do
// not end, Close leaves the cache and the device open to it and says
// acknowledged data since the last fsync may not be durable. A
// truncate's undo (undoCut) is not woken: it puts its file back first.
// If its context ends first, Close sets a second bit in Engine.active
// (abandonBit) before it writes back, and leaves the cache and the
// device open (a running operation may still use them; process exit
// releases them). It then writes back, settles GC and checkpoints
// (under nsMu exclusive, so the snapshot sees no namespace change half
// made) in a goroutine it waits for at most closeAbandonWait: each of
// those may wait behind an operation still running (nsMu, collector.mu,
// the group flush of an fsync); if they do not end in time they go on
// in the background and Close's error says that acknowledged data since
// the last fsync may not be durable (recovery replays the log). An
// operation whose success needs that writeback (a write,
// a deferred create or remove) and that ends after the bit is set fails
// with ErrClosed (Engine.leaveAcked), so no write is acknowledged that
// nothing writes back. Its leave and Close's setting of the bit are
// read-modify-writes of the one word: a leave that saw no bit came
// before it, and the writeback after it sees that write's data.
package engine
