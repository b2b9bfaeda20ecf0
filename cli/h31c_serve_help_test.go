package cli

import (
	"strings"
	"testing"
)

// TestServeHelpListsEveryClientCommand: serve's help listed the CLI's
// client commands as "stat, ls, put, get, rm", leaving out mv.
func TestServeHelpListsEveryClientCommand(t *testing.T) {
	r := runBinary(t, "serve", "--help")
	if r.status != 0 {
		t.Fatalf("serve --help: %+v", r)
	}
	help := strings.Join(strings.Fields(r.stdout), " ")
	if !strings.Contains(help, "the CLI (stat, ls, put, get, mv, rm)") {
		t.Errorf("serve --help does not list every client command:\n%s", r.stdout)
	}
}
