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
package engine
