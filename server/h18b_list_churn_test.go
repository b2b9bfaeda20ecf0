package server_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/zonefold/zonefold/server"
)

// TestH18bListNeverHidesAnUntouchedFile: `zonefold ls` (Client.List)
// pages through the daemon's files by index (OpList off = entries seen so
// far). While other clients create and remove files that sort before
// them, files nobody touches drop out of the listing: `ls` says an
// existing file is not there (seen by hand: 18 of 40 listings of 3000
// untouched files missed 1 to 3 of them while fio created and removed
// 1500 others). Every listing must hold every file that existed, unchanged,
// for its whole duration, once.
func TestH18bListNeverHidesAnUntouchedFile(t *testing.T) {
	d := newServe(t)
	ctx := context.Background()
	c := dialServe(t, d)
	defer c.Close()
	const stable, churn = 3000, 800
	for i := range stable {
		h, _, err := c.Open(ctx, stableName(i), server.OpenCreate|server.OpenDeferSync)
		if err != nil {
			t.Fatal(err)
		}
		c.CloseFile(ctx, h)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		cc := dialServe(t, d)
		defer cc.Close()
		for round := 0; ; round++ {
			for i := range churn {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("a-%05d", i)
				if round%2 == 0 {
					if h, _, err := cc.Open(ctx, name, server.OpenCreate|server.OpenDeferSync); err == nil {
						cc.CloseFile(ctx, h)
					}
				} else {
					cc.Remove(ctx, name)
				}
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()
	deadline := time.Now().Add(15 * time.Second)
	for n := 0; time.Now().Before(deadline); n++ {
		list, err := c.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for _, e := range list {
			seen[e.Name]++
		}
		missing, dup := 0, 0
		for i := range stable {
			switch seen[stableName(i)] {
			case 0:
				missing++
			case 1:
			default:
				dup++
			}
		}
		if missing > 0 || dup > 0 {
			t.Fatalf("listing %d: %d of %d untouched files missing, %d listed twice, while another client created and removed other files",
				n, missing, stable, dup)
		}
	}
}

// stableName is long enough that a listing of the stable files takes
// several OpList pages (the Go client's names area is 64 KiB).
func stableName(i int) string {
	return fmt.Sprintf("s-%05d-a-name-long-enough-to-need-several-pages-of-listing", i)
}
