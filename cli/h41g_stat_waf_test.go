package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestStatWAFAfterRestart: the daemon's counters start at zero with each
// start, so right after a restart a few metadata blocks over a few client
// bytes made stat print "write amplification 0.000" (nothing written yet)
// or thousands (a 2-byte put). stat says the counters are since the
// daemon started and gives no ratio until the client bytes make it mean
// something; --json has the device bytes and the ratio the table shows.
func TestStatWAFAfterRestart(t *testing.T) {
	dir := t.TempDir()
	device := fmt.Sprintf("emu:%s?zone_size=1M&zones=32", filepath.Join(dir, "dev"))
	sock := filepath.Join(dir, "zf.sock")
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, bytes.Repeat([]byte("write amplification "), 3<<20/20), 0o644); err != nil {
		t.Fatal(err)
	}
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stop := serveInProcess(t, device, sock)
	zonefold(t, "put", big, "big", "--socket", sock)
	stop()

	stop = serveInProcess(t, device, sock)
	defer stop()
	waf := regexp.MustCompile(`(?m)^write amplification\s+(.*)$`)
	check := func(when string) {
		t.Helper()
		out := zonefold(t, "stat", "--socket", sock)
		m := waf.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("%s: no write amplification row:\n%s", when, out)
		}
		if !strings.HasPrefix(m[1], "-") {
			t.Errorf("%s: write amplification %q over too few client bytes; want none given", when, m[1])
		}
		if !strings.Contains(out, "since the daemon started") {
			t.Errorf("%s: stat does not say its counters are since the daemon started:\n%s", when, out)
		}
		js := checkJSON(t, "stat --json", zonefold(t, "stat", "--json", "--socket", sock))
		if _, ok := js["dev_written"]; !ok {
			t.Errorf("%s: stat --json has no dev_written", when)
		}
		if v, ok := js["write_amplification"]; ok {
			t.Errorf("%s: stat --json write_amplification %v over too few client bytes", when, v)
		}
	}
	check("after restart")
	zonefold(t, "put", small, "small", "--socket", sock)
	check("after a 2-byte put")

	zonefold(t, "put", big, "big2", "--socket", sock)
	out := zonefold(t, "stat", "--socket", sock)
	m := waf.FindStringSubmatch(out)
	if m == nil || !regexp.MustCompile(`^1\.0\d\d$`).MatchString(m[1]) {
		t.Errorf("after 3 MiB: write amplification row %q; want about 1.0", m)
	}
	var js struct {
		DevWritten int64    `json:"dev_written"`
		WAF        *float64 `json:"write_amplification"`
	}
	if err := json.Unmarshal([]byte(zonefold(t, "stat", "--json", "--socket", sock)), &js); err != nil {
		t.Fatal(err)
	}
	if js.WAF == nil || *js.WAF < 1 || *js.WAF > 1.1 || js.DevWritten < 3<<20 {
		t.Errorf("after 3 MiB: stat --json dev_written %d write_amplification %v", js.DevWritten, js.WAF)
	}
}
