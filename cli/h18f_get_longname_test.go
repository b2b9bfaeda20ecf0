package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestH18fGetToALongLocalName: any name the local file system takes
// (up to NAME_MAX, 255 bytes) must do as get's LOCAL, as for cp(1).
// get's temporary is "." + base(LOCAL) + ".zonefold-get-" + up to 10
// digits beside LOCAL: for a LOCAL of more than about 230 bytes that is
// past NAME_MAX, and get fails ("file name too long") on a name cp
// writes at once.
func TestH18fGetToALongLocalName(t *testing.T) {
	sock, _, _ := newDaemon(t)
	dir := t.TempDir()
	want := []byte("some data")
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, want, 0o644); err != nil {
		t.Fatal(err)
	}
	zonefold(t, "put", src, "f", "--socket", sock)
	local := filepath.Join(dir, strings.Repeat("L", 240))
	if err := os.WriteFile(local, nil, 0o644); err != nil {
		t.Fatalf("the local file system refuses a 240-byte name itself: %v", err)
	}
	os.Remove(local)
	var out, errb bytes.Buffer
	if code := Main([]string{"get", "f", local, "--socket", sock}, &out, &errb); code != 0 {
		t.Fatalf("get f to a 240-byte LOCAL name (which the file system takes): exit %d: %s", code, errb.String())
	}
	if got, _ := os.ReadFile(local); !bytes.Equal(got, want) {
		t.Fatalf("get f %s: %q, want %q", local, got, want)
	}
}
