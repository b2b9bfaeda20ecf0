package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zonefold/zonefold/server"
)

// TestMv: `zonefold mv OLD NEW` renames a file, replacing NEW, durably
// when it returns (the daemon is killed -9 at once after it, and the
// next one serves the names mv left); a missing OLD, a reserved NEW and a
// wrong number of arguments are refused in one line, changing nothing.
func TestMv(t *testing.T) {
	dir := t.TempDir()
	device := "emu:" + filepath.Join(dir, "dev") + "?zone_size=4M&zones=32"
	d := startDaemon(t, device)
	put := func(name string, data []byte) {
		local := filepath.Join(dir, "local-"+name)
		if err := os.WriteFile(local, data, 0o644); err != nil {
			t.Fatal(err)
		}
		zonefold(t, "put", local, name, "--socket", d.socket)
	}
	fData, gData := bytes.Repeat([]byte("f "), 3<<20), []byte("g\n")
	put("f", fData)
	put("g", gData)

	zonefold(t, "mv", "f", "h", "--socket", d.socket)
	if out := zonefold(t, "ls", "--socket", d.socket); out != "g\nh\n" {
		t.Fatalf("ls after mv f h: %q, want g and h", out)
	}
	zonefold(t, "mv", "h", "g", "--socket", d.socket) // replaces g
	for _, tc := range []struct {
		args   []string
		status int
		stderr string
	}{
		{[]string{"mv", "missing", "x"}, 1, "no such file"},
		{[]string{"mv", "g", server.TempPrefix + "x"}, 2, "reserved"},
		{[]string{"mv", "g", ""}, 2, "mv: "},
		{[]string{"mv", "g"}, 2, "mv takes OLD NEW, got 1 argument"},
	} {
		r := runBinary(t, append(tc.args, "--socket", d.socket)...)
		if r.status != tc.status || !strings.Contains(r.stderr, tc.stderr) {
			t.Errorf("zonefold %s: exit %d, stderr %q; want %d and %q", strings.Join(tc.args, " "), r.status, r.stderr, tc.status, tc.stderr)
		}
		checkErrorLine(t, tc.args, r.stderr)
	}

	d.cmd.Process.Kill() // no clean stop: what mv returned for must be on the device
	<-d.done
	t.Cleanup(serveInProcess(t, device, d.socket))
	c, err := server.Dial(context.Background(), d.socket, 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if out := zonefold(t, "ls", "--socket", d.socket); out != "g\n" {
		t.Fatalf("ls after mv h g and a kill -9: %q, want g alone", out)
	}
	if got := content(t, c, "g"); !bytes.Equal(got, fData) {
		t.Fatalf("g after mv h g and a kill -9: %d bytes, want f's %d", len(got), len(fData))
	}
}
