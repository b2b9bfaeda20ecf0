// Package bench owns zonefold's benchmarks: the workloads, the runners
// that drive them against the engine (or another backend), the result
// tables, JSON summaries and charts. The cli wires flags to it; the core
// packages (engine, cache, uring) carry none of this.
//
// Every comparison here follows one rule: two or more configurations run
// in one process, alternating in rounds so that they see the same machine
// noise, and the output gives the ratio of the two (of medians where there
// are several rounds) next to the spread. Absolute numbers on a shared
// machine are noise.
//
// The benchmarks:
//
//   - GC (bench gc): placement and GC policies under overwrite workloads,
//     write amplification and throughput, charts of both over time.
//   - Seeds (bench seeds): each kernel series' comparison, once, against
//     the ratio the series reported.
//   - Folios (bench folios): large folios vs 4 KiB ones through the
//     engine's real writeback path on a null: device, and the cache's
//     one-lock vs two-lock block state update.
//   - Batching (bench batching): plugged vs unplugged io_uring submission.
//   - Run and fio (bench run, bench fio): an fio-like workload in process,
//     and the same through fio and the daemon.
//
// Locks: every mutex here guards one structure of one run (a histogram
// merge, the lsm run's list of temporary folders, a sampler's phase, the
// lifetimes workload's death queue) and is a leaf, with one exception:
// the lifetimes workload holds its queue's lock across the backend's
// Remove, so that the live bytes it counts never run ahead of the files
// it removed. It therefore comes before every lock of the engine (or of
// the kernel backend), and nothing the backend calls back takes it.
//
// Nothing here is used by the product; nothing in the product imports it.
package bench
