package engine

import (
	"fmt"
	"strings"
	"testing"
)

// A device opened "on its log as it stands" (its checkpoint does
// not fit a metadata half) must be able to shrink its namespace by
// removes, until a checkpoint fits
// again and Close succeeds. The log the older zonefold left has little
// room after it, and each remove that needs a switch tries the
// checkpoint that still does not fit.
func TestOversizeNamespaceCanShrink(t *testing.T) {
	t.Skip("known: the log an older zonefold left has room for about one record; every later remove needs a half switch, whose checkpoint still does not fit (ENOSPC). Needs recovery to drop named files before its checkpoint, or a batched remove record")
	devName, cfg, written := oversizeNamespaceDevice(t)
	e, err := Open(devName, cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	removed := 0
	var rerr error
	for name := range written {
		if rerr = e.Remove(name); rerr != nil {
			break
		}
		removed++
	}
	cerr := e.Close()
	t.Logf("removed %d of %d files; last remove error: %v; close: %v", removed, len(written), rerr, cerr)
	if rerr != nil {
		t.Fatalf("remove %d (of %d) on a file system opened on its log as it stands: %v", removed+1, len(written), rerr)
	}
	if cerr != nil {
		t.Fatalf("close after removing every file: %v", cerr)
	}
}

// oversizeNamespaceDevice makes the device an older zonefold, whose
// namespace had no bound (nsRoomFor), could leave: names until a create
// fails, then up to four synced blocks (every other one, block b holding
// b+1) in each file until a write fails, so that no checkpoint of the
// namespace fits a metadata half and Close fails. It returns the device,
// the config, and how many blocks each file holds. It skips the test if
// Close succeeds.
func oversizeNamespaceDevice(t *testing.T) (string, Config, map[string]int) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	e.nsMu.Lock()
	e.nsBytes = -1 << 40 // as an older zonefold: no bound on the namespace
	e.nsMu.Unlock()
	pad := strings.Repeat("x", MaxNameLen-9)
	var names []string
	for i := 0; ; i++ {
		name := fmt.Sprintf("%s%09d", pad, i)
		f, err := e.OpenFile(name, OCreate|ODeferSync)
		if err != nil {
			break
		}
		f.Close()
		names = append(names, name)
	}
	buf := make([]byte, BlockSize)
	written := map[string]int{}
	for _, name := range names {
		f, err := e.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for b := 0; b < 4; b++ {
			buf[0] = byte(b + 1)
			if _, err := f.WriteAt(buf, int64(2*b)*BlockSize); err != nil {
				break
			}
			n++
		}
		if err := f.Sync(); err != nil {
			n = 0
		}
		f.Close()
		written[name] = n
		if n < 4 {
			break
		}
	}
	if err := e.Close(); err == nil {
		t.Skip("the namespace never outgrew a metadata half: nothing to test")
	}
	return devName, cfg, written
}
