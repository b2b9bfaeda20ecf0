// Package engine owns files on zones: the namespace, per-file extent maps,
// zone placement (per-file MRU affinity), self-describing records, reads,
// fsync, garbage collection, metadata and recovery, and the engine's stats.
//
// Invariants:
//
//   - Every append is one record: a header block that names the file, the
//     sequence number and the extents it carries, then the data. A record
//     never crosses a zone. The device holds nothing else outside the
//     metadata zones, so GC and recovery need no other index.
//   - Sequence numbers grow with every record and namespace operation.
//     An extent's version is the sequence number of the client write that
//     produced it; relocation keeps the version, so a newer write always
//     wins over an older one, whatever order records are replayed in.
//   - Placement never exceeds the device's open or active zone limits:
//     the engine opens at most its zone budget, and zones are filled to
//     capacity exactly (a header-only pad record closes a zone whose last
//     block cannot hold a record), so the device sees them become full.
//   - A file's MRU zone is read without a global lock; only taking a new
//     zone goes through the placement lock.
//
// # Crash consistency
//
// What is authoritative, modelled on f2fs's checkpoint packs and XFS's
// log tail:
//
//   - Every checkpoint takes a sequence number of its own, above every
//     operation and record it contains and below every one it does not
//     (appends are quiesced while it snapshots). The two metadata zones
//     hold the last two checkpoints; the valid one with the higher
//     number is the file system as of that number, so no two checkpoints
//     ever tie (a tie, from an older zonefold, is reported by fsck).
//   - After the checkpoint, the namespace operations logged with a
//     higher number and the data and GC records with a higher number,
//     replayed in number order, are the rest. A record's extents carry
//     the version of the write that produced them, so replay never puts
//     old bytes over new; data and GC records both carry the file's size.
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
//   - A torn or corrupt record ends its zone's log; recovery finishes the
//     zone. Its unwritten tail is not damage.
//   - fsync (File.Sync) returns after the file's records are appended and
//     the device flushed: they, their data and the file's size survive a
//     crash. A namespace operation (create, remove, rename, truncate) is
//     durable when it returns: its log record is flushed first. Nothing
//     else is promised for unsynced data, except that what survives of it
//     is whole 4 KiB blocks of some write.
//   - A GC pass reports progress only for a zone it reset, and relocates
//     only when the copy and its headers take less than the reset frees;
//     a writer short of space runs passes itself and gets ENOSPC when
//     none can gain space.
package engine
