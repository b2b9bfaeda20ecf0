package cache

import "testing"

// When a file's writeback looks over (WaitWriteback returns, and so an
// fsync), the blocks it cleaned are out of the dirty count: a writer
// admitted right after an fsync on a nearly full device must not find
// the synced bytes counted both on the device (their room taken when
// they were placed) and still dirty, and be sent to GC or refused for
// room it has. EndWriteback lowered the file's blocks in flight before
// the dirty count, so there was a moment where writeback had ended and
// the cleaned blocks were still dirty.
func TestWritebackEndsAfterItsBlocksAreClean(t *testing.T) {
	c := newTestCache(t, Config{Bytes: 16 << 20, MaxOrder: 9})
	mustWrite(t, c, 1, 0, fill(128<<10, 1), nil)
	exts := c.BeginWriteback(1, 0, nil)
	if len(exts) == 0 {
		t.Fatal("nothing to write back")
	}
	// Between its two updates, EndWriteback shows either order.
	testHookEndWritebackCounts = func(fs *fileState) {
		if fs.wbBlocks.Load() == 0 {
			if d := c.DirtyBytes(); d != 0 {
				t.Errorf("writeback of file 1 has ended (no blocks in flight) while the cache still counts %d of its cleaned bytes dirty", d)
			}
		}
	}
	t.Cleanup(func() { testHookEndWritebackCounts = nil })
	c.EndWriteback(exts, nil)
	if c.DirtyBytes() != 0 {
		t.Fatalf("dirty after a whole writeback: %d", c.DirtyBytes())
	}
}
