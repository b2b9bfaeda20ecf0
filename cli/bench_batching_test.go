package cli

import (
	"bytes"
	"strings"
	"testing"
)

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
