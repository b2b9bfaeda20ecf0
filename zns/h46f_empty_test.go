package zns

import (
	"errors"
	"strings"
	"testing"
)

// fsck of an empty file (one made with touch, never formatted) said
// it is empty and to format it; the size check h46b put before the
// lost-table check took it for a device that lost its table and its
// geometry, or a truncated one.
func TestEmuFsckOfAnEmptyFileSaysItIsNotFormatted(t *testing.T) {
	for _, opts := range []Options{{Existing: true}, {Existing: true, InferLostTable: true}} {
		p := sparseFile(t, 0)
		err := refusedOpenOf(t, p, p, lostGeo, opts, 4096)
		for _, w := range []string{"is empty", "zonefold format DEVICE"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Open(%+v) of an empty file = %v, want it to say %q", opts, err, w)
			}
		}
		if strings.Contains(err.Error(), "truncated") || errors.Is(err, ErrLostZoneTable) {
			t.Errorf("Open(%+v) of an empty file = %v: it was not truncated, nor lost its table", opts, err)
		}
	}
}

// A blank file shorter than the geometry given (fsck of a file made
// with truncate, never formatted) is refused for its size before it is
// read; the refusal names a blank file and format too, not only a lost
// table or a truncation.
func TestEmuFsckOfASmallBlankFileSaysItMayBeBlank(t *testing.T) {
	p := sparseFile(t, 4<<20)
	err := refusedOpenOf(t, p, p, lostGeo, Options{Existing: true}, 1<<20)
	for _, w := range []string{"needs", "blank", "zonefold format DEVICE"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("fsck of a small blank file = %v, want it to say %q", err, w)
		}
	}
}
