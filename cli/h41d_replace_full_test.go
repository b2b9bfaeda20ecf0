package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestH41dPutReplaceInAFullNamespace: once the files' names fill the
// metadata, put cannot replace an existing file either (its temporary
// needs a name of its own until the rename). What the user sees must be
// a clear error that names the target and says what frees room, with
// the target as it was; a remove of another file lets the same put
// through. It advised "or use a shorter name", which cannot help a
// replace, and did not say why replacing a file needs a new name.
func TestH41dPutReplaceInAFullNamespace(t *testing.T) {
	dir := t.TempDir()
	sock, c := serveNamespace(t, dir)
	local := filepath.Join(dir, "local")
	if err := os.WriteFile(local, []byte("old bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	zonefold(t, "put", local, "target", "--socket", sock)
	first := fillNamespace(t, c)
	if err := os.WriteFile(local, []byte("new bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := Main([]string{"put", local, "target", "--socket", sock}, &out, &errb)
	msg := errb.String()
	t.Logf("put over an existing file in a full namespace: exit %d: %s", code, msg)
	if code != 1 || !strings.Contains(msg, `"target"`) || !strings.Contains(msg, "file names") || !strings.Contains(msg, "zonefold rm") ||
		!strings.Contains(msg, "temporary") || strings.Contains(msg, "shorter name") {
		t.Fatalf("put over an existing file in a full namespace: exit %d, %q; want an error naming \"target\" that says file names fill the metadata, that the replace needs a temporary name, and that zonefold rm makes room (a shorter name does not help a replace)", code, msg)
	}
	if got := content(t, c, "target"); string(got) != "old bytes" {
		t.Fatalf("a failed put left target holding %q", got)
	}
	noTemporaries(t, c)
	zonefold(t, "rm", first, "--socket", sock)
	zonefold(t, "put", local, "target", "--socket", sock)
	if got := content(t, c, "target"); string(got) != "new bytes" {
		t.Fatalf("target holds %q", got)
	}
}
