package engine

import (
	"fmt"
	"strings"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// TestH45eCutLogReportNamesTheBlockItPassedOver: the record of a remove
// logged after the newest checkpoint is zeroed at rest, so the walk of
// the log stops there (checkCutLog reports the cut), and the block after
// it fails to read (bad media). checkCutLog passes that block over
// (laterMeta's bad) and its report said only what whole records follow
// the cut, as if it had looked at everything: it must name the block it
// could not read, where, and that it was passed over, in Open's damage
// and in fsck's problems; without a bad block it says nothing of one.
func TestH45eCutLogReportNamesTheBlockItPassedOver(t *testing.T) {
	for _, bad := range []bool{false, true} {
		t.Run(fmt.Sprintf("bad=%v", bad), func(t *testing.T) {
			devName, h, wp, devAt := zeroedRemoveImage(t)
			lo, hi := int64(-1), int64(-1)
			if bad {
				lo, hi = devAt+BlockSize, devAt+2*BlockSize
			}
			// fsck first: it never writes, and Open's checkpoint
			// leaves no cut to find.
			problems := strings.Join(h43hFsckBad(t, devName, lo, hi), "\n")
			dev, err := zns.Open(devName, zns.Options{})
			if err != nil {
				t.Fatal(err)
			}
			e, err := OpenDevice(&h39fBadRead{Emu: dev.(*zns.Emu), lo: lo, hi: hi}, smallConfig())
			if err != nil {
				dev.Close()
				t.Fatalf("Open with the log cut at a zeroed record (bad block after it: %v): %v", bad, err)
			}
			damage := strings.Join(e.damage, "\n")
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			dev.Close()
			cut := fmt.Sprintf("metadata half %d's log stops at %d", h, wp)
			passed := fmt.Sprintf("the block at %d after it fails to read (the medium failed the read: ", wp+BlockSize)
			passedTail := "input/output error) and was passed over, so what it holds is not known"
			for what, text := range map[string]string{"Open's damage": damage, "fsck's problems": problems} {
				if !strings.Contains(text, cut) {
					t.Errorf("%s do not report the cut %q:\n%s", what, cut, text)
				}
				if i := strings.Index(text, passed); bad && (i < 0 || !strings.Contains(text[i:], passedTail)) {
					t.Errorf("%s do not say the bad block was passed over (want %q ... %q):\n%s", what, passed, passedTail, text)
				}
				if !bad && strings.Contains(text, "fails to read") {
					t.Errorf("%s name a bad block where none is:\n%s", what, text)
				}
			}
			t.Logf("%s", damage)
		})
	}
}

// zeroedRemoveImage is an image whose record of a remove, logged after
// the newest checkpoint, was zeroed at rest: the emu device, the
// metadata half and offset in it of that record, and its device offset.
func zeroedRemoveImage(t *testing.T) (devName string, h int, wp, devAt int64) {
	t.Helper()
	var opAt int64
	devName, path, _, _ := h39cImage(t, func(e *Engine) {
		createSynced(t, e, "b", pattern(8<<10, 3)).Close()
		e.meta.mu.Lock()
		h, wp = e.meta.active, e.meta.wp
		e.meta.mu.Unlock()
		if err := e.Remove("b"); err != nil {
			t.Fatal(err)
		}
		z, zoff := e.sb.metaAt(h, wp)
		devAt = int64(z)*e.geo.ZoneSize + zoff
		opAt = emuOf(t, e).FileOffset(devAt)
	})
	h39cPatch(t, path, opAt, func(b []byte) { clear(b) })
	return devName, h, wp, devAt
}
