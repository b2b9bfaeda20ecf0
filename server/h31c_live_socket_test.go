package server

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// TestListenRefusesASocketAnotherProgramListensOn: Listen took any socket
// file at its path whose lock nobody held for one a dead daemon left and
// removed it, so `serve --socket PATH` on the socket of another running
// service (an ssh agent's, a database's) unlinked it from under that
// service and, on exit, left nothing there. A socket something still
// listens on (of any type) is refused now; a stale one is still
// replaced.
func TestListenRefusesASocketAnotherProgramListensOn(t *testing.T) {
	for _, network := range []string{"unix", "unixpacket", "unixgram"} {
		t.Run(network, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "other.sock")
			var other interface{ Close() error }
			if network == "unixgram" {
				c, err := net.ListenUnixgram(network, &net.UnixAddr{Name: path, Net: network})
				if err != nil {
					t.Fatal(err)
				}
				other = c
			} else {
				l, err := net.Listen(network, path)
				if err != nil {
					t.Fatal(err)
				}
				other = l
			}
			defer other.Close()
			l, err := Listen(path)
			if err == nil {
				l.Close()
				t.Fatalf("Listen took over a socket a %s listener holds", network)
			}
			if !strings.Contains(err.Error(), "in use") || !strings.Contains(err.Error(), path) {
				t.Errorf("Listen on a live %s socket: %v", network, err)
			}
			if !exists(path) {
				t.Fatalf("the refused Listen removed the other program's socket")
			}
			if exists(path + ".lock") {
				t.Errorf("the refused Listen left %s.lock", path)
			}
		})
	}
	t.Run("stale", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "stale.sock")
		ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		ul.SetUnlinkOnClose(false)
		ul.Close() // the file stays, nobody listens: a dead daemon's
		l, err := Listen(path)
		if err != nil {
			t.Fatalf("Listen on a stale socket: %v", err)
		}
		l.Close()
	})
}
