package server

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// connTemps is how many temporaries each connection of d's server has on
// its list to remove when it ends.
func connTemps(d *daemon) []int {
	s := d.srv
	s.mu.Lock()
	defer s.mu.Unlock()
	var n []int
	for c := range s.conns {
		c.tempsMu.Lock()
		n = append(n, len(c.temps))
		c.tempsMu.Unlock()
	}
	return n
}

// TestH38bTemporariesListStaysBounded: a connection remembers the
// temporaries it creates, to remove them when it ends. A client that
// lives for days and writes its files the way put does (an exclusive
// create of a TempPrefix name, then a rename to the file's name, or a
// remove when it gives up) made that list grow by one name per file for
// the connection's whole life: it never forgot a temporary that was
// renamed away or removed (50,000 puts on one connection held 10 MB more
// of the daemon's heap until it disconnected), and its end then stat'ed
// every name. The list now holds about what still sits at its names: a
// temporary renamed or removed by its own connection is forgotten at
// once, and one another connection took away is forgotten within a
// doubling of the list. A temporary still there is still removed when
// its connection ends.
func TestH38bTemporariesListStaysBounded(t *testing.T) {
	d := newDaemon(t)
	a, b := dial(t, d.socket), dial(t, d.socket)
	bg := context.Background()
	create := func(name string) {
		t.Helper()
		h, _, err := a.Open(bg, name, OpenCreate|OpenExcl|OpenDeferSync)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.CloseFile(bg, h); err != nil {
			t.Fatal(err)
		}
	}
	create(TempPrefix + "live") // never renamed: goes with a
	const n = 300
	for i := range n {
		tmp := fmt.Sprintf("%s%d", TempPrefix, i)
		create(tmp)
		var err error
		switch i % 3 {
		case 0:
			err = a.Rename(bg, tmp, fmt.Sprintf("file-%d", i%10))
		case 1:
			err = a.Remove(bg, tmp)
		case 2: // another connection takes it away
			err = b.Rename(bg, tmp, fmt.Sprintf("other-%d", i%10))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	got := connTemps(d)
	most := 0
	for _, k := range got {
		most = max(most, k)
	}
	// What sits at a's temporaries' names now is one file ("live"); the
	// list may hold those b took away since its last pruning, at most
	// as many again as it held after it (and never fewer than 64).
	if most > 2*minTempsPrune {
		t.Errorf("after %d temporaries on one connection, %d still there, the connections' lists hold %v names; want at most %d", n, 1, got, 2*minTempsPrune)
	}
	a.Close()
	for limit := time.Now().Add(time.Minute); ; runtime.Gosched() {
		_, err := b.Stat(bg, TempPrefix+"live")
		if errors.Is(err, syscall.ENOENT) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(limit) {
			t.Fatal("a temporary outlived the connection that created it by a minute")
		}
	}
}
