package cli

import (
	"strings"
	"testing"
)

// TestH31dHelpUnknownTopicIsUsageError: `zonefold help nosuch` printed the
// root's help and exited 0 (cobra took the unknown topic for an argument
// of the root command), where `zonefold nosuch` is a usage error. A
// script checking `zonefold help CMD` to see whether CMD exists was told
// it did. It is a usage error now, like an unknown command; a known topic
// still prints its help and exits 0.
func TestH31dHelpUnknownTopicIsUsageError(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"help", "nosuch"}, `"nosuch"`},
		{[]string{"help", "zones", "nosuch"}, `"nosuch"`},
		{[]string{"help", "serve", "extra"}, `"extra"`},
	} {
		r := runBinary(t, tc.args...)
		if r.status != 2 || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
			t.Errorf("%v: status %d, stdout %q, stderr %q; want 2, nothing on stdout, and %s named",
				tc.args, r.status, r.stdout, r.stderr, tc.want)
			continue
		}
		checkErrorLine(t, tc.args, r.stderr)
	}
	for _, args := range [][]string{{"help"}, {"help", "serve"}, {"help", "zones", "reset"}} {
		r := runBinary(t, args...)
		if r.status != 0 || !strings.Contains(r.stdout, "Usage:") {
			t.Errorf("%v: status %d, stdout %q, stderr %q; want 0 and the help", args, r.status, r.stdout, r.stderr)
		}
	}
}
