package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/zonefold/zonefold/server"
)

// TestH37aPutIntoAFullNamespaceSaysWhy: a device whose metadata holds
// as many names as it can (many files, long names) refuses creates with
// ENOSPC while nearly all of its data zones are free. put said
//
//	zonefold: open ".zonefold-tmp.6b5d98ff5341e594": no space left on device
//
// naming neither the file asked for nor what is full, while `zonefold
// stat` showed 482 of 498 data zones free. put must name its target and
// say that it is file names there is no room for, and what frees it
// (a remove); after one, the same put succeeds.
func TestH37aPutIntoAFullNamespaceSaysWhy(t *testing.T) {
	dir := t.TempDir()
	sock, c := serveNamespace(t, dir)
	first := fillNamespace(t, c)
	local := filepath.Join(dir, "local")
	if err := os.WriteFile(local, []byte("a few bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := Main([]string{"put", local, "target", "--socket", sock}, &out, &errb)
	msg := errb.String()
	if code != 1 || !strings.Contains(msg, `"target"`) || !strings.Contains(msg, "no space left on device") ||
		!strings.Contains(msg, "file names") || !strings.Contains(msg, "zonefold rm") {
		t.Fatalf("put into a full namespace: exit %d, %q; want 1 and an error that names \"target\" and says the file names fill the metadata, and that zonefold rm makes room", code, msg)
	}
	noTemporaries(t, c)
	zonefold(t, "rm", first, "--socket", sock)
	zonefold(t, "put", local, "target", "--socket", sock)
	if got := content(t, c, "target"); string(got) != "a few bytes" {
		t.Fatalf("target holds %q", got)
	}
}

// serveNamespace serves a formatted emu device of 16 zones of 1 MiB in
// dir, at the socket it returns, and dials it; both end at cleanup (the
// client first).
func serveNamespace(t *testing.T, dir string) (sock string, c *server.Client) {
	t.Helper()
	device := fmt.Sprintf("emu:%s?zone_size=1M&zones=16", filepath.Join(dir, "dev"))
	sock = filepath.Join(dir, "zf.sock")
	t.Cleanup(serveInProcess(t, device, sock))
	c, err := server.Dial(context.Background(), sock, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return sock, c
}

// fillNamespace creates empty files through c until the namespace
// refuses one with ENOSPC: long names (255 bytes) until one does not
// fit, then short ones into the rest. It returns the first file's name:
// removing it makes room for a name.
func fillNamespace(t *testing.T, c *server.Client) string {
	t.Helper()
	ctx := context.Background()
	long := func(i int) string {
		s := fmt.Sprintf("%06d-", i)
		return s + strings.Repeat("n", 255-len(s))
	}
	n := 0
	for _, name := range []func(int) string{long, func(i int) string { return fmt.Sprint(i) }} {
		for ; ; n++ {
			if n == 100_000 {
				t.Fatal("100000 files and the namespace is not full")
			}
			h, _, err := c.Open(ctx, name(n), server.OpenCreate|server.OpenExcl|server.OpenDeferSync)
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			c.CloseFile(ctx, h)
		}
	}
	t.Logf("the namespace took %d files", n)
	return long(0)
}
