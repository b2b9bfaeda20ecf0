package cli

import (
	"bytes"
	"strings"
	"testing"
)

// The command reaches bench seeds and prints its table.
func TestBenchSeedsCommand(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"bench", "seeds", "--quick"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"idea", "kernel", "zonefold", "meets", "aio batching", "smoke test"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, stdout.String())
		}
	}
}
