package cli

// `zonefold serve --cache SIZE` with a size the machine cannot give (a
// typo: 8T for 8G) or above the cache's own limit (8 TiB) must be refused
// with one line saying why, as --cache 30G on a 23 GiB machine is
// ("cache: size 30 GiB is more than the memory available ...") and --cache 1 is
// ("cache: size 1 B: want 4 KiB to 8 TiB"). It crashed the
// daemon instead: the engine makes its checksum cache (1/64 of --cache,
// a Go slice) before the folio cache checks its size or maps its arena,
// and a slice of 128 GiB or more ends the process with the Go runtime's
// "fatal error: runtime: out of memory" and a dump of every goroutine.

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestH17aServeHugeCacheIsRefusedNotCrashed(t *testing.T) {
	bin := buildZonefold(t)
	for _, size := range []string{"8T", "100T"} {
		t.Run(size, func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(bin, "serve", "emu:"+filepath.Join(dir, "dev")+"?zone_size=4M&zones=16",
				"--socket", filepath.Join(dir, "zf.sock"), "--format", "--cache", size)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			var err error
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				cmd.Process.Kill()
				<-done
				t.Fatalf("serve --cache %s still running after 30 s (want a refusal)\n%.2000s", size, out.String())
			}
			if err == nil {
				t.Fatalf("serve --cache %s exited 0\n%.2000s", size, out.String())
			}
			msg := out.String()
			if strings.Contains(msg, "fatal error") || strings.Contains(msg, "goroutine ") ||
				strings.Count(strings.TrimSpace(msg), "\n") > 2 {
				t.Fatalf("serve --cache %s crashed (%v) instead of refusing the size in a line:\n%.1500s", size, err, msg)
			}
			if !strings.Contains(msg, "cache") {
				t.Fatalf("serve --cache %s: %v, and its message does not name the cache:\n%s", size, err, msg)
			}
		})
	}
}
