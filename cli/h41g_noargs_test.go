package cli

import (
	"bytes"
	"strings"
	"testing"
)

// A command that takes no arguments, given one, said `unknown command
// "x" for "zonefold stat"`, as if stat had subcommands and x were a
// misspelt one. It says the command takes no arguments, and which it got.
func TestNoArgsCommandsSayTheyTakeNone(t *testing.T) {
	for _, cmd := range [][]string{{"stat"}, {"ls"}, {"bench", "folios"}, {"bench", "batching"}, {"bench", "seeds"}} {
		var out, errb bytes.Buffer
		code := Main(append(append([]string{}, cmd...), "extra"), &out, &errb)
		want := "zonefold: " + strings.Join(cmd, " ") + ` takes no arguments, got 1 ("extra")`
		if code != 2 || !strings.HasPrefix(errb.String(), want) {
			t.Errorf("%v extra: exit %d, stderr %q; want exit 2 and %q", cmd, code, errb.String(), want)
		}
	}
}
