package cli

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestH18fGetHonoursUmask: a file `zonefold get` creates must get the
// permissions any new file gets, 0666 less the umask, as cp(1), a shell
// redirection or os.Create give it: a user with umask 077 keeps what
// they copy out private. get writes a temporary (os.CreateTemp, 0600)
// and then chmods it to a fixed 0644 before renaming it into place, so
// the copy is world-readable whatever the umask.
func TestH18fGetHonoursUmask(t *testing.T) {
	sock, _, _ := newDaemon(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "secret")
	if err := os.WriteFile(src, []byte("private key material"), 0o600); err != nil {
		t.Fatal(err)
	}
	zonefold(t, "put", src, "secret", "--socket", sock)
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	out := filepath.Join(dir, "copy")
	zonefold(t, "get", "secret", out, "--socket", sock)
	fi, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Fatalf("get under umask 077 made %s with mode %#o; want %#o (0666 &^ umask, as cp or os.Create)", out, got, 0o600)
	}
}
