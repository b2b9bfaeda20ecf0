package cache

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// newFullDirtyCache makes a 64 KiB cache whose every byte is dirty data
// of file 1, far below its background threshold: an access that needs
// memory sleeps in reclaim until writeback cleans a folio. pressure gets
// ShortOfMemory as each OnPressure (the kick to writeback) saw it.
func newFullDirtyCache(t *testing.T) (c *Cache, pressure chan bool) {
	t.Helper()
	pressure = make(chan bool, 100)
	c = newTestCache(t, Config{Bytes: 64 << 10, MaxOrder: 9, DirtyLimit: 1 << 30,
		BackgroundDirty: 1 << 30, OnPressure: func() { pressure <- c.ShortOfMemory() }})
	mustWrite(t, c, 1, 0, fill(64<<10, 1), nil)
	if c.ShortOfMemory() {
		t.Fatal("short of memory before any access waits for it")
	}
	return c, pressure
}

// writeBg writes 8 KiB of file at 0 in a goroutine: done gets its error.
func writeBg(ctx context.Context, c *Cache, file uint64) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := c.Write(ctx, c.File(file), 0, fill(8192, byte(file)), nil)
		done <- err
	}()
	return done
}

// TestH46jShortOfMemoryCountsOnlySleepers: ShortOfMemory, which makes the
// flusher write back below its background threshold and before expiry,
// holds exactly while an access sleeps in reclaim for a clean folio. A
// count left behind (an access that gave up, or woke and slept again)
// would make writeback flush eagerly for ever; one lost would let a
// sleeper wait for expiry again. Every way out of the sleep, with the
// real cache: the context ending, a wake that finds no folio clean (a
// failed writeback), the next queued access taking over, success, Shut.
func TestH46jShortOfMemoryCountsOnlySleepers(t *testing.T) {
	c, pressure := newFullDirtyCache(t)
	ctx1, cancel1 := context.WithCancel(context.Background())
	done1 := writeBg(ctx1, c, 2)
	if !<-pressure {
		t.Fatal("the kick for memory came before ShortOfMemory held: the flusher it wakes would not write")
	}
	// A second access queues behind the first for its turn at reclaim:
	// it is not asleep for a folio yet.
	done2 := writeBg(context.Background(), c, 3)
	waitUntil(func() bool { return c.memWaitN.Load() == 2 })
	if n := c.memSleeping.Load(); n != 1 {
		t.Fatalf("%d accesses counted asleep for memory, want 1 (the second waits for its turn)", n)
	}
	cancel1()
	if err := <-done1; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled write: %v, want context.Canceled", err)
	}
	// The second has the turn now and sleeps in its place.
	if !<-pressure {
		t.Fatal("the second access's kick came before ShortOfMemory held")
	}
	if n := c.memSleeping.Load(); n != 1 {
		t.Fatalf("after the first gave up and the second slept: %d counted asleep, want 1", n)
	}
	// A failed writeback wakes the sleeper with nothing clean: it sleeps
	// again, counted once.
	exts := c.BeginWriteback(1, 64<<10, nil)
	c.EndWriteback(exts, errors.New("injected write error"))
	if !<-pressure {
		t.Fatal("the sleeper woke to nothing clean and slept again uncounted")
	}
	if n := c.memSleeping.Load(); n != 1 {
		t.Fatalf("after a wake to nothing clean: %d counted asleep, want 1", n)
	}
	b := newMemBacking()
	b.flush(c)
	if err := <-done2; err != nil {
		t.Fatal(err)
	}
	if c.ShortOfMemory() {
		t.Fatalf("short of memory after every access was served (%d counted)", c.memSleeping.Load())
	}

	c, pressure = newFullDirtyCache(t)
	done := writeBg(context.Background(), c, 2)
	<-pressure
	c.Shut(errors.New("shutting down"))
	if err := <-done; err == nil {
		t.Fatal("a write asleep for memory succeeded across Shut with every folio dirty")
	}
	if c.ShortOfMemory() {
		t.Fatalf("short of memory after Shut ended the only sleeper (%d counted)", c.memSleeping.Load())
	}
}

// TestH46jShortOfMemoryBalancedUnderChurn: many writers and readers short
// of memory at once, some giving up (their contexts end at random), while
// a flusher cleans now and then; once all are done nothing is counted
// asleep, and every access was served or ended by its context.
func TestH46jShortOfMemoryBalancedUnderChurn(t *testing.T) {
	c := newTestCache(t, Config{Bytes: 64 << 10, MaxOrder: 9, DirtyLimit: 1 << 30, BackgroundDirty: 1 << 30})
	b := newMemBacking()
	stop := make(chan struct{})
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		for {
			select {
			case <-stop:
				return
			default:
			}
			b.flush(c)
			time.Sleep(100 * time.Microsecond)
		}
	}()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 46))
			buf := make([]byte, 8192)
			for range 200 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.IntN(200))*time.Microsecond)
				file := uint64(1 + r.IntN(4))
				off := int64(r.IntN(32)) * 8192
				var err error
				if r.IntN(2) == 0 {
					_, err = c.Write(ctx, c.File(file), off, buf, nil)
				} else {
					_, err = c.Read(ctx, c.File(file), off, buf, b)
				}
				cancel()
				if err != nil && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("file %d at %d: %v", file, off, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-flushed
	if n := c.memSleeping.Load(); n != 0 {
		t.Fatalf("%d accesses counted asleep for memory after all ended: writeback would flush eagerly for ever", n)
	}
	if s := c.Stats(); s.AllocWaits == 0 {
		t.Error("no access ever slept for memory: the test did not test the count")
	}
}
