package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestH46lGetThroughALinkLoopFails: get NAME LOCAL with LOCAL a symbolic
// link in a loop (a -> b -> a) replaced the link with a regular file and
// exited 0; cp says "Too many levels of symbolic links" and leaves the
// links. get does too now.
func TestH46lGetThroughALinkLoopFails(t *testing.T) {
	sock, c, _ := newDaemon(t)
	createEmpty(t, c, "f")
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if err := os.Symlink("b", a); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a", b); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := Main([]string{"get", "f", a, "--socket", sock}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "too many levels of symbolic links") {
		t.Errorf("get f %s (a link loop): exit %d, stderr %q; want exit 1 and ELOOP", a, code, errb.String())
	}
	for _, l := range []string{a, b} {
		if st, err := os.Lstat(l); err != nil || st.Mode()&os.ModeSymlink == 0 {
			t.Errorf("%s is no longer a symbolic link: %v", l, err)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("get left %d entries in %s, want the 2 links", len(ents), dir)
	}
}
