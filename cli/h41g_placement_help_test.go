package cli

import (
	"strings"
	"testing"

	"github.com/zonefold/zonefold/engine"
)

// --placement's help listed mru, none and round-robin, while the flag
// also takes hinted (serve's clients pass write-life hints, as fio's
// write_hint does): a user reading the help could not find it. Every
// policy the flag accepts is named in its help.
func TestPlacementHelpNamesEveryPolicy(t *testing.T) {
	for _, cmd := range [][]string{{"serve", "--help"}, {"bench", "run", "--help"}} {
		out := zonefold(t, cmd...)
		var line string
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "--placement") {
				line = l
			}
		}
		for _, p := range []engine.Policy{engine.PolicyMRU, engine.PolicyNone, engine.PolicyRoundRobin, engine.PolicyHinted} {
			if _, err := engine.ParsePolicy(p.String()); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(line, p.String()) {
				t.Errorf("%s: --placement help %q does not name %s", cmd[0], strings.TrimSpace(line), p)
			}
		}
	}
}
