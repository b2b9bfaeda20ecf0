package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestSocketHelpStatesOneDefault: --socket's help read "the daemon's
// Unix socket (default from $ZONEFOLD_SOCK) (default "/tmp/zonefold.sock")":
// two defaults, and the one with a value did not say where it came from.
// It says one default now: the value in force, and where it comes from.
func TestSocketHelpStatesOneDefault(t *testing.T) {
	bin := zonefoldBinary(t)
	set := filepath.Join(t.TempDir(), "env.sock")
	for _, env := range []string{"", set} {
		for _, c := range []string{"serve", "ls", "stat"} {
			cmd := exec.Command(bin, c, "--help")
			cmd.Env = append(os.Environ(), "ZONEFOLD_SOCK="+env)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s --help: %v", c, err)
			}
			line := regexp.MustCompile(`(?m)^ *--socket .*$`).FindString(string(out))
			want := `(default "/tmp/zonefold.sock"; $ZONEFOLD_SOCK sets another)`
			if env != "" {
				want = `(default "` + set + `", from $ZONEFOLD_SOCK)`
			}
			if strings.Count(line, "default") != 1 || !strings.Contains(line, want) {
				t.Errorf("ZONEFOLD_SOCK=%q %s --help: %q; want one default: %s", env, c, line, want)
			}
		}
	}
}
