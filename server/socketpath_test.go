package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A socket path longer than sun_path is refused by name and length,
// before anything is made for it; the longest one allowed works. Before,
// serve said "bind: invalid argument" and clients "connect: invalid
// argument", naming neither the path nor its length.
func TestSocketPathLength(t *testing.T) {
	dir := t.TempDir()
	pathOf := func(n int) string {
		p := filepath.Join(dir, strings.Repeat("s", n-len(dir)-1))
		if len(p) != n {
			t.Fatalf("built a %d-byte path, want %d", len(p), n)
		}
		return p
	}
	if len(dir)+2 > MaxSocketPath {
		t.Skipf("temporary directory %s leaves no room for a socket path", dir)
	}
	for _, n := range []int{MaxSocketPath, MaxSocketPath + 1, 300} {
		path := pathOf(n)
		l, err := Listen(path)
		if n <= MaxSocketPath {
			if err != nil {
				t.Fatalf("Listen on a %d-byte path: %v", n, err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err == nil {
			l.Close()
			t.Fatalf("Listen on a %d-byte path succeeded", n)
		}
		for _, want := range []string{path, "at most 107"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Listen on a %d-byte path: %q does not say %q", n, err, want)
			}
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("a refused Listen left %s behind", ents[0].Name())
		}
		_, err = Dial(context.Background(), path, 0)
		if err == nil || !strings.Contains(err.Error(), "at most 107") || !strings.Contains(err.Error(), path) {
			t.Errorf("Dial of a %d-byte path: %v; want it to name the path and say at most 107", n, err)
		}
	}
}
