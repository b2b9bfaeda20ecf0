package cli

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestH46lGetDoesNotReplaceADaemonsDevice: get NAME LOCAL with LOCAL the
// emu file a running daemon serves (a typo, a wrong tab completion)
// renamed the copy over it and exited 0: the daemon went on with the
// unlinked file and its next start found NAME's bytes where the file
// system was, everything lost; the same over the socket's PATH.lock let
// a second daemon in. get refuses a LOCAL another process holds a
// flock(2) on (a daemon's device and lock file are flocked while it
// runs) and leaves it as it was.
func TestH46lGetDoesNotReplaceADaemonsDevice(t *testing.T) {
	sock, c, device := newDaemon(t)
	createEmpty(t, c, "f")
	path := strings.TrimPrefix(device, "emu:")
	path = path[:strings.IndexByte(path, '?')]
	for _, local := range []string{path, sock + ".lock"} {
		before, err := os.Stat(local)
		if err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		code := Main([]string{"get", "f", local, "--socket", sock}, &out, &errb)
		after, err := os.Stat(local)
		if err != nil {
			t.Fatal(err)
		}
		if code != 1 || !os.SameFile(before, after) || after.Size() != before.Size() || !strings.Contains(errb.String(), "in use") {
			t.Errorf("get f %s (flocked by the daemon): exit %d, stderr %q, same file %v, size %d (was %d); want exit 1 saying it is in use, the file as it was",
				local, code, errb.String(), os.SameFile(before, after), after.Size(), before.Size())
		}
	}
	// The daemon still serves from its device.
	createEmpty(t, c, "g")
}
