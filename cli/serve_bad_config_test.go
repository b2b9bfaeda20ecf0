package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/procfs"

	"github.com/zonefold/zonefold/server"
)

// TestServeBadEngineConfigTouchesNoDevice: `serve DEV --format --force`
// with an engine setting the device or the machine cannot take (a cache
// above the cache's limit or above the machine's memory, more open zones
// than the device allows) erased DEV and then failed: the format ran
// before the engine looked at its settings, so a typo (--cache 8T for
// 8G) cost the device's files. Every such setting is refused before the
// device is touched, in sizes a person reads (not "arena of
// 109951162777600 bytes").
func TestServeBadEngineConfigTouchesNoDevice(t *testing.T) {
	twiceMemory := fmt.Sprintf("%dG", 2*memTotalGiB(t)+1)
	for _, tc := range []struct {
		name  string
		flags []string
		// stderr must match this.
		stderr string
		// The exit status: more open zones than the device allows is a
		// bad flag value (2, h42d), and so is a cache above the cache's
		// limit (h43c); memory the machine lacks is a failure.
		status int
	}{
		{"cache-above-limit", []string{"--cache", "100T"}, `--cache 100T: want at least 4 KiB and less than 8 TiB`, 2},
		{"cache-above-memory", []string{"--cache", twiceMemory}, `memory`, 1},
		{"open-zones-above-device", []string{"--open-zones", "99"}, `--open-zones 99: the device allows 8 open zones`, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			device := fmt.Sprintf("emu:%s?zone_size=4M&zones=32&max_open=8", filepath.Join(dir, "dev"))
			sock := filepath.Join(dir, "zf.sock")
			want := deviceWithAFile(t, device, sock)
			args := append([]string{"serve", device, "--format", "--force", "--socket", sock}, tc.flags...)
			r := runBinary(t, args...)
			if r.status != tc.status || !regexp.MustCompile(tc.stderr).MatchString(r.stderr) {
				t.Fatalf("%s: exit %d, stderr %q; want %d and %q", strings.Join(args, " "), r.status, r.stderr, tc.status, tc.stderr)
			}
			if regexp.MustCompile(`\d{10}`).MatchString(strings.ReplaceAll(r.stderr, device, "DEVICE")) {
				t.Errorf("%s: stderr %q gives a size in raw bytes", strings.Join(args, " "), r.stderr)
			}
			checkErrorLine(t, []string{"serve"}, r.stderr)
			checkDeviceKeptFile(t, device, sock, want, strings.Join(args, " "))
		})
	}
}

// deviceWithAFile puts a file named "kept" on device, served on sock
// for the while, and returns its content.
func deviceWithAFile(t *testing.T, device, sock string) []byte {
	t.Helper()
	local := filepath.Join(t.TempDir(), "local")
	want := []byte("on the device before a serve that failed\n")
	if err := os.WriteFile(local, want, 0o644); err != nil {
		t.Fatal(err)
	}
	stop := serveInProcess(t, device, sock)
	zonefold(t, "put", local, "kept", "--socket", sock)
	stop()
	return want
}

// checkDeviceKeptFile serves device on sock and fails the test unless
// its file "kept" holds want: what failed (a command line) left it.
func checkDeviceKeptFile(t *testing.T, device, sock string, want []byte, what string) {
	t.Helper()
	t.Cleanup(serveInProcess(t, device, sock))
	c, err := server.Dial(context.Background(), sock, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Stat(context.Background(), "kept"); err != nil {
		t.Fatalf("%s failed, and the device lost its file: %v", what, err)
	}
	if got := content(t, c, "kept"); !bytes.Equal(got, want) {
		t.Fatalf("%s failed, and the device's file holds %q, want %q", what, got, want)
	}
}

// memTotalGiB is the machine's memory in GiB, rounded up (procfs parses
// /proc/meminfo, as cache.CheckSize's own reading does).
func memTotalGiB(t *testing.T) int64 {
	t.Helper()
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	mi, err := fs.Meminfo()
	if err != nil || mi.MemTotalBytes == nil {
		t.Skipf("no MemTotal in /proc/meminfo: %v", err)
	}
	return int64((*mi.MemTotalBytes + 1<<30 - 1) >> 30)
}
