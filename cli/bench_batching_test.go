package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestBenchBatchingJSON(t *testing.T) {
	var out, errOut bytes.Buffer
	code := Main([]string{"bench", "batching", "--json", "--time", "40ms", "--rounds", "2",
		"--qd", "16", "--dir", t.TempDir(), "--file-size", "1048576"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var got batchingJSON
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out.String())
	}
	// Batching shows in the counters, whatever the timing: a plugged
	// round enters the kernel once for all 16 SQEs, unplugged once each.
	if got.NopPluggedSQEsPerEnter != 16 || got.FilePluggedSQEsPer != 16 {
		t.Errorf("plugged SQEs per enter = %v (nop), %v (file); want 16", got.NopPluggedSQEsPerEnter, got.FilePluggedSQEsPer)
	}
	if got.NopUnpluggedSQEsPer != 1 || got.FileUnpluggedSQEsPer != 1 {
		t.Errorf("unplugged SQEs per enter = %v, %v; want 1", got.NopUnpluggedSQEsPer, got.FileUnpluggedSQEsPer)
	}
	if got.NopPluggedIOPS <= 0 || got.NopUnpluggedIOPS <= 0 || got.NopRatio <= 0 || got.FileRatio <= 0 {
		t.Errorf("missing measurements: %+v", got)
	}
}

func TestBenchBatchingRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--qd", "0"},
		{"--bs", "1000"},
		{"--rounds", "0"},
		{"--file-size", "10"},
		{"--dir", "/nonexistent/dir"},
	} {
		var out, errOut bytes.Buffer
		code := Main(append([]string{"bench", "batching", "--time", "10ms"}, args...), &out, &errOut)
		if code == 0 || !strings.HasPrefix(errOut.String(), "zonefold: ") {
			t.Errorf("%v: exit %d, stderr %q; want a one-line error", args, code, errOut.String())
		}
	}
}
