package server

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/zonefold/zonefold/internal/syncbuf"
)

// TestServeNullWarnsAndSaysWhyFull: `serve null:` answered ENOSPC at
// about 60% full once overwrites needed GC, which cannot read back what
// a device that stores nothing holds, with nothing in the log to say
// why. The daemon warns at start that capacity is one fill, and logs
// the reason with the first ENOSPC; the client still gets ENOSPC.
func TestServeNullWarnsAndSaysWhyFull(t *testing.T) {
	var logs syncbuf.Buffer
	cfg := testConfig("null:?size=32M&zone_size=1M", filepath.Join(t.TempDir(), "zf.sock"))
	cfg.Engine.CacheBytes, cfg.Engine.DirtyLimit = 1<<20, 256<<10
	cfg.Log = slog.New(slog.NewTextHandler(&logs, nil))
	d := startDaemon(t, cfg)
	if !strings.Contains(logs.String(), "keeps no data") || !strings.Contains(logs.String(), "one fill") {
		t.Fatalf("serve null: starts without warning that it keeps no data:\n%s", logs.String())
	}
	// Reads of what the cache no longer holds fail (fio randread on a
	// file larger than --cache: EIO, logged as a checksum failure): the
	// warning says so, for the user who then sees EIO.
	if !strings.Contains(logs.String(), "not in the cache fail with EIO") {
		t.Fatalf("serve null: does not warn that reads of data the cache evicted fail with EIO:\n%s", logs.String())
	}
	ctx := context.Background()
	c, err := Dial(ctx, d.socket, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h, _, err := c.Open(ctx, "f", OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8<<10)
	live := int64(32<<20) / 2 / int64(len(buf))
	rng := rand.New(rand.NewPCG(1, 2))
	for off := int64(0); off < live && err == nil; off++ {
		_, err = c.WriteAt(ctx, h, buf, off*int64(len(buf)))
	}
	for i := int64(0); i < 8*live && err == nil; i++ {
		_, err = c.WriteAt(ctx, h, buf, rng.Int64N(live)*int64(len(buf)))
		if err == nil && i%64 == 63 {
			err = c.Fsync(ctx, h)
		}
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("4 capacities of random overwrites on null: ended with %v, want ENOSPC", err)
	}
	if !strings.Contains(logs.String(), "device full") || strings.Count(logs.String(), "keeps no data") < 2 {
		t.Fatalf("the daemon's log does not say why null: is full:\n%s", logs.String())
	}
}
