// Package cachehook reaches into the cache for the benchmarks, which
// compare the product with baselines the product does not use. It is
// internal so that no client of the cache sees these switches: package
// cache fills the hooks in when it initialises, package bench calls them.
package cachehook

// SetSplitStateLock makes a *cache.Cache set a block's uptodate and dirty
// bits in two critical sections instead of one (the baseline of the
// iomap one-lock comparison). Call it right after cache.New, before the
// cache is used.
var SetSplitStateLock func(c any, split bool)

// SetMemoryWaitHook makes a *cache.Cache call hook (nil: nothing) each
// time an access is about to wait for memory, holding no cache lock:
// for tests that hold a waiter there, or need to know it waits, without
// any timing.
var SetMemoryWaitHook func(c any, hook func())
