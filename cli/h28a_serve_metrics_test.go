package cli

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// TestH28aServeMetricsFailureTouchesNoDevice: serve claimed the socket,
// then the device, then opened the engine (formatting with --format,
// erasing with --force), and only then listened on --metrics. A metrics
// address in use or malformed failed serve after the device was made:
// `serve emu:NEW --format --metrics :9100` with the port taken exited 1
// and left the formatted emu file behind (the conventions promise a
// failed command leaves no emu file it created), and
// `serve DEV --format --force --metrics :9100` erased DEV, every file on
// it, and then exited 1 without serving. A serve that fails on its
// arguments must leave the device as it was.
func TestH28aServeMetricsFailureTouchesNoDevice(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	// A malformed address is the flag's value wrong: exit 2 (h44d); one
	// in use, the machine's state: 1.
	for _, metrics := range []struct {
		name, addr, stderr string
		status             int
	}{
		{"in-use", busy.Addr().String(), "address already in use", 1},
		{"malformed", "nohost", "missing port in address", 2},
	} {
		t.Run(metrics.name+"/new-emu", func(t *testing.T) {
			dir := t.TempDir()
			sock := filepath.Join(dir, "zf.sock")
			r := runBinary(t, "serve", "emu:"+filepath.Join(dir, "dev")+"?zone_size=1M&zones=8", "--format",
				"--socket", sock, "--metrics", metrics.addr)
			if r.status != metrics.status || !strings.Contains(r.stderr, metrics.stderr) {
				t.Fatalf("serve --metrics %s: exit %d, stderr %q; want %d and %q", metrics.addr, r.status, r.stderr, metrics.status, metrics.stderr)
			}
			checkErrorLine(t, []string{"serve"}, r.stderr)
			for _, left := range []string{"dev", "zf.sock", "zf.sock.lock"} {
				if exists(filepath.Join(dir, left)) {
					t.Errorf("serve --format --metrics %s failed and left %s behind", metrics.addr, left)
				}
			}
		})
		t.Run(metrics.name+"/force", func(t *testing.T) {
			dir := t.TempDir()
			device := fmt.Sprintf("emu:%s?zone_size=4M&zones=32", filepath.Join(dir, "dev"))
			sock := filepath.Join(dir, "zf.sock")
			want := deviceWithAFile(t, device, sock)
			r := runBinary(t, "serve", device, "--format", "--force", "--socket", sock, "--metrics", metrics.addr)
			if r.status != metrics.status || !strings.Contains(r.stderr, metrics.stderr) {
				t.Fatalf("serve --format --force --metrics %s: exit %d, stderr %q; want %d and %q",
					metrics.addr, r.status, r.stderr, metrics.status, metrics.stderr)
			}
			checkDeviceKeptFile(t, device, sock, want, "serve --format --force --metrics "+metrics.addr)
		})
	}
}
