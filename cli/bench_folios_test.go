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
		{"--block-size", "3000"},
	} {
		var out, errOut bytes.Buffer
		code := Main(append([]string{"bench", "folios", "--time", "10ms"}, args...), &out, &errOut)
		// A value the benchmark refuses is a usage error (exit 2) that
		// points at the help, as every other command's bad flag is.
		if code != 2 || !strings.HasPrefix(errOut.String(), "zonefold: ") || !strings.Contains(errOut.String(), "zonefold bench folios --help") {
			t.Errorf("%v: exit %d, stderr %q; want a one-line usage error (exit 2)", args, code, errOut.String())
		}
	}
}
