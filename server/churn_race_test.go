package server_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/zonefold/zonefold/server"
)

// TestChurnReadsRaceNamespace: on a small device with a cache far smaller
// than the data (cold reads, GC running), writers create, overwrite,
// fsync, truncate, rename and remove their own files while readers open,
// read, stat and list every name, racing each of those. No request may
// hang (each has a deadline), no error but ENOENT may come back to a
// reader, every block a reader sees is whole (one write's stamp, or
// zeros), and each writer's own files read back exactly as it wrote them.
func TestChurnReadsRaceNamespace(t *testing.T) {
	dir := t.TempDir()
	d := startServeCache(t, fmt.Sprintf("emu:%s?zone_size=1M&zones=12", filepath.Join(dir, "dev")),
		filepath.Join(dir, "zf.sock"), "4M")
	const writers, readers, files, blocks, bs = 3, 2, 4, 64, 4096
	dur := 4 * time.Second
	if os.Getenv("ZONEFOLD_CHURN_SOAK") != "" {
		dur = 60 * time.Second
	}
	stop := time.Now().Add(dur)
	var wg sync.WaitGroup
	errc := make(chan error, writers+readers)
	name := func(w, f int) string { return fmt.Sprintf("w%d.f%d", w, f) }
	stamp := func(p []byte, w, f int, ver uint64, blk int) {
		for i := 0; i < len(p); i += 16 {
			binary.LittleEndian.PutUint64(p[i:], uint64(w<<32|f<<16|blk))
			binary.LittleEndian.PutUint64(p[i+8:], ver)
		}
	}
	// whole: one write's stamp, then zeros from where a truncate cut the
	// block (sizes are multiples of 16).
	zero := make([]byte, 16)
	whole := func(p []byte) bool {
		cut := false
		for i := 16; i < len(p); i += 16 {
			switch q := string(p[i : i+16]); {
			case q == string(zero):
				cut = true
			case cut || q != string(p[:16]):
				return false
			}
		}
		return true
	}
	call := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 20*time.Second)
	}
	// spawn runs body on its own connection and seeded generator.
	spawn := func(seed uint64, body func(c *server.Client, rng *rand.Rand) error) {
		wg.Add(1)
		c := dialServe(t, d)
		go func() {
			defer wg.Done()
			defer c.Close()
			errc <- body(c, rand.New(rand.NewPCG(seed, 7)))
		}()
	}
	for w := range writers {
		spawn(uint64(w), func(c *server.Client, rng *rand.Rand) error {
			model := map[string][]byte{}
			var ver uint64
			buf := make([]byte, blocks*bs)
			for time.Now().Before(stop) {
				f := rng.IntN(files)
				n := name(w, f)
				ctx, cancel := call()
				switch op := rng.IntN(10); {
				case op < 5: // create or overwrite blocks, maybe fsync
					h, _, err := c.Open(ctx, n, server.OpenCreate)
					if err != nil {
						cancel()
						return fmt.Errorf("open %s: %w", n, err)
					}
					ver++
					first, cnt := rng.IntN(blocks), 1+rng.IntN(16)
					cnt = min(cnt, blocks-first)
					p := buf[:cnt*bs]
					for b := range cnt {
						stamp(p[b*bs:(b+1)*bs], w, f, ver, first+b)
					}
					if _, err := c.WriteAt(ctx, h, p, int64(first*bs)); err != nil {
						cancel()
						return fmt.Errorf("write %s: %w", n, err)
					}
					m := model[n]
					if len(m) < (first+cnt)*bs {
						m = append(m, make([]byte, (first+cnt)*bs-len(m))...)
					}
					copy(m[first*bs:], p)
					model[n] = m
					if rng.IntN(3) == 0 {
						err = c.Fsync(ctx, h)
					}
					err = errors.Join(err, c.CloseFile(ctx, h))
					if err != nil {
						cancel()
						return fmt.Errorf("fsync/close %s: %w", n, err)
					}
				case op < 6: // truncate
					h, _, err := c.Open(ctx, n, 0)
					if errors.Is(err, os.ErrNotExist) {
						break
					}
					if err != nil {
						cancel()
						return fmt.Errorf("open %s: %w", n, err)
					}
					size := rng.IntN(blocks*bs/16) * 16
					if err := errors.Join(c.Truncate(ctx, h, int64(size)), c.CloseFile(ctx, h)); err != nil {
						cancel()
						return fmt.Errorf("truncate %s: %w", n, err)
					}
					m := model[n]
					if size <= len(m) {
						m = m[:size]
					} else {
						m = append(m, make([]byte, size-len(m))...)
					}
					model[n] = m
				case op < 8: // rename to another own name
					to := name(w, rng.IntN(files))
					if _, ok := model[n]; !ok || to == n {
						break
					}
					if err := c.Rename(ctx, n, to); err != nil {
						cancel()
						return fmt.Errorf("rename %s %s: %w", n, to, err)
					}
					model[to] = model[n]
					delete(model, n)
				case op < 9: // remove
					if _, ok := model[n]; !ok {
						break
					}
					if err := c.Remove(ctx, n); err != nil {
						cancel()
						return fmt.Errorf("remove %s: %w", n, err)
					}
					delete(model, n)
				default: // verify one own file
					want, ok := model[n]
					h, size, err := c.Open(ctx, n, 0)
					if !ok {
						if !errors.Is(err, os.ErrNotExist) {
							cancel()
							return fmt.Errorf("open of removed %s: %v", n, err)
						}
						break
					}
					if err != nil {
						cancel()
						return fmt.Errorf("open %s: %w", n, err)
					}
					got := make([]byte, size)
					if _, err := c.ReadAt(ctx, h, got, 0); err != nil && size > 0 {
						cancel()
						return fmt.Errorf("read %s: %w", n, err)
					}
					c.CloseFile(ctx, h)
					if string(got) != string(want) {
						cancel()
						return fmt.Errorf("%s reads back %d bytes not as written (%d)", n, len(got), len(want))
					}
				}
				cancel()
			}
			return nil
		})
	}
	for r := range readers {
		spawn(uint64(writers+r), func(c *server.Client, rng *rand.Rand) error {
			buf := make([]byte, blocks*bs)
			for time.Now().Before(stop) {
				ctx, cancel := call()
				n := name(rng.IntN(writers), rng.IntN(files))
				switch rng.IntN(4) {
				case 0:
					if _, err := c.List(ctx); err != nil {
						cancel()
						return fmt.Errorf("list: %w", err)
					}
				case 1:
					if _, err := c.Stat(ctx, n); err != nil && !errors.Is(err, os.ErrNotExist) {
						cancel()
						return fmt.Errorf("stat %s: %w", n, err)
					}
				default:
					h, size, err := c.Open(ctx, n, 0)
					if errors.Is(err, os.ErrNotExist) {
						cancel()
						continue
					}
					if err != nil {
						cancel()
						return fmt.Errorf("open %s: %w", n, err)
					}
					k, err := c.ReadAt(ctx, h, buf[:min(size, int64(len(buf)))], 0)
					c.CloseFile(ctx, h)
					// ENOENT: removed since the open; EOF: cut since.
					if err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, io.EOF) {
						cancel()
						return fmt.Errorf("read %s: %w", n, err)
					}
					for b := 0; b+bs <= k; b += bs {
						if !whole(buf[b : b+bs]) {
							cancel()
							return fmt.Errorf("%s block %d torn", n, b/bs)
						}
					}
				}
				cancel()
			}
			return nil
		})
	}
	wg.Wait()
	close(errc)
	c := dialServe(t, d)
	st, err := c.Stats(context.Background())
	c.Close()
	if err != nil {
		t.Error(err)
	} else {
		t.Logf("GC runs %d, moved %d B, resets %d; cache misses %d", st.GCRuns, st.GCWritten, st.GCResets, st.Cache.Misses)
		if st.GCWritten == 0 || st.Cache.Misses == 0 {
			t.Errorf("GC relocated nothing (%d B) or no read was cold (%d): the race this test is for did not happen", st.GCWritten, st.Cache.Misses)
		}
	}
	for err := range errc {
		if err != nil {
			t.Errorf("%v\n%s", err, d.stderr)
		}
	}
	d.stop()
}
