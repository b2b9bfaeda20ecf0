package cache

import "github.com/zonefold/zonefold/internal/cachehook"

func init() {
	cachehook.SetSplitStateLock = func(c any, split bool) { c.(*Cache).splitStateLock = split }
	cachehook.SetMemoryWaitHook = func(c any, hook func()) { c.(*Cache).memWaitHook = hook }
}
