package server

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestUnnamedFilesGoWhenTheirClientsVanish: a file removed or renamed
// over while clients have it open is kept for their handles; a client
// that goes away without closing them (a crash, a kill) must still
// release it, or the daemon holds the file's space, which no name
// accounts for, until it restarts. The daemon closes a vanished
// session's handles; their last close drops the file.
func TestUnnamedFilesGoWhenTheirClientsVanish(t *testing.T) {
	d := newDaemon(t)
	ctx := context.Background()
	admin := dial(t, d.socket)
	for i, how := range []string{"remove", "rename over", "remove", "rename over"} {
		name := fmt.Sprintf("f%d", i)
		h, _, err := admin.Open(ctx, name, OpenCreate)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.WriteAt(ctx, h, make([]byte, 64<<10), 0); err != nil {
			t.Fatal(err)
		}
		if err := admin.CloseFile(ctx, h); err != nil {
			t.Fatal(err)
		}
		// Two clients hold it, one of each framing; only one vanishes
		// while the other still holds it.
		holders := []*Client{dial(t, d.socket), dialFraming(t, d.socket)}
		for _, c := range holders {
			if _, _, err := c.Open(ctx, name, 0); err != nil {
				t.Fatal(err)
			}
		}
		switch how {
		case "remove":
			err = admin.Remove(ctx, name)
		case "rename over":
			g, _, err2 := admin.Open(ctx, name+".new", OpenCreate)
			if err2 != nil {
				t.Fatal(err2)
			}
			if err := admin.CloseFile(ctx, g); err != nil {
				t.Fatal(err)
			}
			err = admin.Rename(ctx, name+".new", name)
		}
		if err != nil {
			t.Fatal(err)
		}
		waitUnnamed(t, admin, 1, fmt.Sprintf("round %d (%s), both holders open", i, how))
		holders[i%2].Close()
		waitUnnamed(t, admin, 1, fmt.Sprintf("round %d (%s), one holder gone", i, how))
		holders[1-i%2].Close()
		waitUnnamed(t, admin, 0, fmt.Sprintf("round %d (%s), both holders gone", i, how))
	}
}

// waitUnnamed waits for the daemon's stats to show want unnamed files:
// a vanished session's handles close once the daemon sees it gone. The
// deadline only catches a leak (or a hang), never decides a pass.
func waitUnnamed(t *testing.T, c *Client, want int, when string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := c.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.UnnamedFiles == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d unnamed file(s) (%d bytes), want %d", when, st.UnnamedFiles, st.UnnamedBytes, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
