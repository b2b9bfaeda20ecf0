package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/zonefold/zonefold/internal/syncbuf"
)

// TestH37aNamespaceFullIsLogged: a create refused because the files'
// names fill the room the metadata keeps for them gets a bare ENOSPC,
// on a device whose data zones are nearly all free; the engine's error
// says why (how many files, how many bytes of names, the half's size),
// and the daemon dropped it. A client other than the CLI (fio, a Go
// program) had nothing to go on: the daemon's log must say it.
func TestH37aNamespaceFullIsLogged(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(fmt.Sprintf("emu:%s?zone_size=1M&zones=16", filepath.Join(dir, "dev")), filepath.Join(dir, "zf.sock"))
	var logged syncbuf.Buffer
	cfg.Log = slog.New(slog.NewTextHandler(&logged, nil))
	d := startDaemon(t, cfg)
	c := dial(t, d.socket)
	ctx := context.Background()
	for i := 0; ; i++ {
		if i == 20_000 {
			t.Fatal("20000 files of 255-byte names and the namespace is not full")
		}
		name := fmt.Sprintf("%06d-", i)
		h, _, err := c.Open(ctx, name+strings.Repeat("n", 255-len(name)), OpenCreate|OpenExcl|OpenDeferSync)
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		c.CloseFile(ctx, h)
	}
	if out := logged.String(); !strings.Contains(out, "file names") || !strings.Contains(out, "files,") {
		t.Fatalf("a create refused for a full namespace left the daemon's log without why:\n%s", out)
	}
}
