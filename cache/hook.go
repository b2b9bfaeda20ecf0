package cache

import "github.com/zonefold/zonefold/internal/cachehook"

func init() {
	cachehook.SetSplitStateLock = func(c any, split bool) { c.(*Cache).splitStateLock = split }
}
