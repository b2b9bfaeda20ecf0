package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// TestH38eDialRegionTooLarge: Dial asked for a region past MaxRegion
// says so, with the bound, as it does for one too small.
//
// Before the fix the daemon's refusal came back as "zonefold: daemon
// refused the connection: invalid argument", which does not say what
// was wrong (the daemon logs why; the program does not see its log).
func TestH38eDialRegionTooLarge(t *testing.T) {
	d := newDaemon(t)
	for _, size := range []int{MaxRegion + 1, 1 << 40} {
		c, err := Dial(context.Background(), d.socket, size)
		if err == nil {
			c.Close()
			t.Fatalf("Dial with a region of %d bytes (MaxRegion %d) succeeded", size, MaxRegion)
		}
		if !strings.Contains(err.Error(), "too large") || !strings.Contains(err.Error(), fmt.Sprint(MaxRegion)) {
			t.Errorf("Dial with a region of %d bytes: %v, want it to say the region is too large, and the bound", size, err)
		}
	}
}
