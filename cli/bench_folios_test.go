package cli

import (
	"bytes"
	"strings"
	"testing"
)

func TestBenchFoliosRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--rounds", "0"},
		{"--bs", "1000"},
		{"--cache-size", "4096"},
		{"--small-bs", "0"},
		{"--max-io", "10"},
	} {
		var out, errOut bytes.Buffer
		code := Main(append([]string{"bench", "folios", "--time", "10ms"}, args...), &out, &errOut)
		if code == 0 || !strings.HasPrefix(errOut.String(), "zonefold: ") {
			t.Errorf("%v: exit %d, stderr %q; want a one-line error", args, code, errOut.String())
		}
	}
}
