package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/zonefold/zonefold/server"
)

// TestH46lLongNameErrorIsShort: get and rm of a name longer than a name
// can be (a 5000-byte argument) printed the whole name back in the
// error, a screenful, where put and mv say "a name of 5000 bytes, more
// than 255" with its first bytes. All four say so now, and rm still
// removes the other names it was given.
func TestH46lLongNameErrorIsShort(t *testing.T) {
	sock, c, _ := newDaemon(t)
	long := strings.Repeat("b", 5000)
	for _, args := range [][]string{{"get", long, t.TempDir() + "/x"}, {"rm", long}, {"put", "/dev/null", long}, {"mv", "a", long}} {
		var out, errb bytes.Buffer
		code := Main(append(args, "--socket", sock), &out, &errb)
		if code == 0 || errb.Len() > 400 || !strings.Contains(errb.String(), "5000 bytes") {
			t.Errorf("zonefold %s <5000 bytes>: exit %d, stderr of %d bytes: %.300q; want an error that says the name is 5000 bytes, in a line", args[0], code, errb.Len(), errb.String())
		}
	}
	createEmpty(t, c, "kept")
	var out, errb bytes.Buffer
	if code := Main([]string{"rm", long, "kept", "--socket", sock}, &out, &errb); code != 1 {
		t.Errorf("rm <long> kept: exit %d, want 1: %s", code, errb.String())
	}
	if _, err := c.Stat(t.Context(), "kept"); err == nil {
		t.Errorf("rm <long> kept left kept: the valid name must still be removed")
	}
}

// createEmpty creates the empty file name through c.
func createEmpty(t *testing.T, c *server.Client, name string) {
	t.Helper()
	h, _, err := c.Open(t.Context(), name, server.OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CloseFile(t.Context(), h); err != nil {
		t.Fatal(err)
	}
}
