package cli

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/server"
)

// serveInProcess runs a daemon until the returned stop is called.
func serveInProcess(t *testing.T, device, socket string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- server.Run(ctx, server.RunConfig{Device: device, Socket: socket, Format: true,
			Engine: engine.Config{CacheBytes: 16 << 20},
			Ready:  func(*server.Server, net.Addr) { close(ready) }})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("daemon: %v", err)
	}
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("daemon stop: %v", err)
		}
	}
}

func zonefold(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := Main(args, &out, &errb); code != 0 {
		t.Fatalf("zonefold %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
	}
	return out.String()
}

func TestClientCommands(t *testing.T) {
	dir := t.TempDir()
	device := fmt.Sprintf("emu:%s?zone_size=4M&zones=32", filepath.Join(dir, "dev"))
	sock := filepath.Join(dir, "zf.sock")
	local := filepath.Join(dir, "local")
	want := bytes.Repeat([]byte("put is durable "), 10<<20/15) // 10 MiB: several chunks
	if err := os.WriteFile(local, want, 0o644); err != nil {
		t.Fatal(err)
	}
	stop := serveInProcess(t, device, sock)
	zonefold(t, "put", local, "f", "--socket", sock)
	zonefold(t, "put", local, "g", "--socket", sock)
	if out := zonefold(t, "ls", "--socket", sock); out != "f\ng\n" {
		t.Fatalf("ls: %q", out)
	}
	if out := zonefold(t, "ls", "-l", "--socket", sock); out != "10 MiB  f\n10 MiB  g\n" {
		t.Fatalf("ls -l: %q", out)
	}
	zonefold(t, "rm", "g", "--socket", sock)
	if out := zonefold(t, "stat", "--socket", sock); !strings.Contains(out, "host written") || !strings.Contains(out, "removed while open") {
		t.Fatalf("stat: %q", out)
	}
	stop()
	// What put wrote survives a restart of the daemon.
	stop = serveInProcess(t, device, sock)
	defer stop()
	copyPath := filepath.Join(dir, "copy")
	zonefold(t, "get", "f", copyPath, "--socket", sock)
	got, err := os.ReadFile(copyPath)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("get after restart: %d bytes, %v; want %d equal bytes", len(got), err, len(want))
	}
	if out := zonefold(t, "ls", "--socket", sock); out != "f\n" {
		t.Fatalf("rm did not remove g: %q", out)
	}
	var errb bytes.Buffer
	if code := Main([]string{"get", "missing", copyPath, "--socket", sock}, &bytes.Buffer{}, &errb); code == 0 || !strings.Contains(errb.String(), "no such file") {
		t.Fatalf("get of a missing file: exit %d, %q", code, errb.String())
	}
}
