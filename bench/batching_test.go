package bench

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

func TestBatchingJSON(t *testing.T) {
	var out bytes.Buffer
	err := Batching(&out, BatchingOptions{JSON: true, Duration: 40 * time.Millisecond, Rounds: 2,
		QD: 16, BS: 4096, Dir: t.TempDir(), FileSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
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
