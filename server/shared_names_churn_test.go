package server

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zonefold/zonefold/engine"
)

// Clients that share names: each of them opens, writes, reads, fsyncs,
// truncates, renames and removes the same six names at random, holding
// handles to files that others rename over or remove meanwhile, on a
// device small enough that GC relocates all the time and a cache far
// smaller than the files. TestChurnReadsRaceNamespace gives each writer
// names of its own; here the renames move files under other clients'
// handles and reads. Every write is of whole blocks, each block stamped
// with its own offset in the file (whichever name the file has now), so
// a read of any block must return zeros or a stamp of that block: bytes
// of another offset or of nothing written are misplaced (a mapping that
// a rename, truncate or GC relocation got wrong). No request may hang
// (each has a deadline) or fail but as the races allow (ENOENT for a
// name another client took away), and after a restart every file must
// read as stamps or zeros too.

const sharedMagic = 0x736861726564 // "shared"

// sharedStamp fills p, block block of a file, with (magic, block, gen)
// triples.
func sharedStamp(p []byte, block int64, gen uint64) {
	for i := 0; i+24 <= len(p); i += 24 {
		binary.LittleEndian.PutUint64(p[i:], sharedMagic)
		binary.LittleEndian.PutUint64(p[i+8:], uint64(block))
		binary.LittleEndian.PutUint64(p[i+16:], gen)
	}
}

// sharedCheck says why p, block block of a file, is neither zeros nor
// stamps of that block, or "" if it is one of them.
func sharedCheck(p []byte, block int64) string {
	zero := true
	for _, b := range p {
		zero = zero && b == 0
	}
	if zero {
		return ""
	}
	for i := 0; i+24 <= len(p); i += 24 {
		if m := binary.LittleEndian.Uint64(p[i:]); m != sharedMagic {
			return fmt.Sprintf("byte %d is not a stamp (%#x)", i, m)
		}
		if b := binary.LittleEndian.Uint64(p[i+8:]); b != uint64(block) {
			return fmt.Sprintf("byte %d holds block %d's stamp", i, b)
		}
	}
	return ""
}

func TestSharedNamesChurnKeepsBlocksInPlace(t *testing.T) {
	const clients, bs, maxBlocks, maxRun = 6, 4096, 256, 16
	ops := 2500
	if testing.Short() {
		ops = 500
	}
	dev := fmt.Sprintf("emu:%s?zone_size=1M&zones=12", filepath.Join(t.TempDir(), "dev"))
	cfg := RunConfig{Device: dev, Socket: filepath.Join(t.TempDir(), "zf.sock"), Format: true,
		Engine: engine.Config{CacheBytes: 2 << 20, DirtyLimit: 1 << 20},
		Log:    slog.New(slog.NewTextHandler(io.Discard, nil))}
	d := startDaemon(t, cfg)
	names := []string{"a", "b", "c", "d", "e", "f"}
	var gen atomic.Uint64
	var wg sync.WaitGroup
	for w := range clients {
		c := dial(t, d.socket)
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 44))
			var hs []uint32 // this client's handles
			buf := make([]byte, maxRun*bs)
			// do runs one request with a deadline: a request that
			// hangs fails the test, naming it.
			do := func(what string, f func(ctx context.Context) error) error {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				err := f(ctx)
				if errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("client %d: %s: no reply in 30 s", w, what)
				}
				return err
			}
			for range ops {
				op := rng.IntN(100)
				if len(hs) == 0 || op < 10 {
					if len(hs) >= 8 {
						i := rng.IntN(len(hs))
						if err := do("close", func(ctx context.Context) error { return c.CloseFile(ctx, hs[i]) }); err != nil {
							t.Errorf("client %d: close: %v", w, err)
							return
						}
						hs = append(hs[:i], hs[i+1:]...)
					}
					name := names[rng.IntN(len(names))]
					var h uint32
					err := do("open", func(ctx context.Context) (err error) {
						h, _, err = c.Open(ctx, name, OpenCreate)
						return err
					})
					if err != nil {
						t.Errorf("client %d: open %s: %v", w, name, err)
						return
					}
					hs = append(hs, h)
					continue
				}
				h := hs[rng.IntN(len(hs))]
				blk, n := int64(rng.IntN(maxBlocks)), 1+rng.IntN(maxRun)
				p := buf[:n*bs]
				var err error
				switch {
				case op < 45:
					g := gen.Add(1)
					for i := range n {
						sharedStamp(p[i*bs:(i+1)*bs], blk+int64(i), g)
					}
					err = do("write", func(ctx context.Context) error { _, err := c.WriteAt(ctx, h, p, blk*bs); return err })
				case op < 75:
					var k int
					err = do("read", func(ctx context.Context) (err error) { k, err = c.ReadAt(ctx, h, p, blk*bs); return err })
					if err == io.EOF {
						err = nil
					}
					if k%bs != 0 {
						t.Errorf("client %d: read %d bytes at block %d: not whole blocks (sizes are)", w, k, blk)
					}
					for i := range k / bs {
						if why := sharedCheck(p[i*bs:(i+1)*bs], blk+int64(i)); why != "" {
							t.Errorf("client %d: read of block %d: %s", w, blk+int64(i), why)
						}
					}
				case op < 82:
					err = do("fsync", func(ctx context.Context) error { return c.Fsync(ctx, h) })
				case op < 87:
					size := int64(rng.IntN(maxBlocks)) * bs
					err = do("truncate", func(ctx context.Context) error { return c.Truncate(ctx, h, size) })
				case op < 93:
					from, to := names[rng.IntN(len(names))], names[rng.IntN(len(names))]
					err = do("rename", func(ctx context.Context) error { return c.Rename(ctx, from, to) })
				case op < 97:
					name := names[rng.IntN(len(names))]
					err = do("remove", func(ctx context.Context) error { return c.Remove(ctx, name) })
				default:
					name := names[rng.IntN(len(names))]
					err = do("stat", func(ctx context.Context) error { _, err := c.Stat(ctx, name); return err })
				}
				// ENOENT: another client took the name away; ENOSPC:
				// handles keep removed files' space until they close.
				if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, StatusNoSpace) {
					t.Errorf("client %d: %v", w, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if st := d.srv.e.Stats(); st.GCResets == 0 {
		t.Errorf("no zone was reset by GC: the test did not run against GC (stats %+v)", st)
	}
	c := dial(t, d.socket)
	cfg.Format = false
	d, c = d.restart(t, cfg, c)
	for _, name := range names {
		h, size, err := c.Open(context.Background(), name, 0)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		p := make([]byte, size)
		if _, err := c.ReadAt(context.Background(), h, p, 0); err != nil && err != io.EOF {
			t.Fatalf("after restart: read %s: %v", name, err)
		}
		for b := range size / bs {
			if why := sharedCheck(p[b*bs:(b+1)*bs], b); why != "" {
				t.Errorf("after restart: %s block %d: %s", name, b, why)
			}
		}
	}
}
