package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestH18fGetWritesThroughSymlinkAndFIFO: `zonefold get NAME LOCAL` where
// LOCAL is a symlink or a FIFO must deliver the data where LOCAL leads,
// as cp(1) (and every shell redirection) does: through the symlink into
// its target, into the FIFO for its reader. get writes a temporary
// beside LOCAL and renames it over LOCAL, so it replaces the symlink or
// the FIFO itself with a regular file and exits 0: the target keeps its
// old content, the FIFO's reader gets nothing. `zonefold get NAME
// /dev/stdout | consumer` is the same case (/dev/stdout is a symlink to
// /proc/self/fd/1): the consumer reads nothing, get exits 0, and, run as
// root, /dev/stdout is replaced by a regular file in /dev for every
// later process; so is `zonefold get NAME /dev/null` (a character
// device: run as root, get replaces /dev/null itself with a copy of
// NAME; as another user it fails, unable to write a temporary in /dev).
func TestH18fGetWritesThroughSymlinkAndFIFO(t *testing.T) {
	sock, _, _ := newDaemon(t)
	dir := t.TempDir()
	want := bytes.Repeat([]byte("zonefold"), 512) // 4 KiB: fits in a pipe's buffer
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, want, 0o644); err != nil {
		t.Fatal(err)
	}
	zonefold(t, "put", src, "f", "--socket", sock)

	t.Run("symlink", func(t *testing.T) {
		target := filepath.Join(dir, "target")
		if err := os.WriteFile(target, []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(dir, "link")
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		zonefold(t, "get", "f", link, "--socket", sock)
		fi, err := os.Lstat(link)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(target)
		if fi.Mode()&os.ModeSymlink == 0 || !bytes.Equal(got, want) {
			t.Fatalf("get f %s (a symlink to %s) exited 0, and %s is now %v, its target holds %d bytes (%q...); want the symlink kept and its target holding f's %d bytes, as cp f %s does",
				link, target, link, fi.Mode(), len(got), got[:min(len(got), 8)], len(want), link)
		}
	})

	t.Run("fifo", func(t *testing.T) {
		fifo := filepath.Join(dir, "fifo")
		if err := syscall.Mkfifo(fifo, 0o644); err != nil {
			t.Fatal(err)
		}
		// A reader is there before get opens the FIFO.
		r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		zonefold(t, "get", "f", fifo, "--socket", sock)
		fi, err := os.Lstat(fifo)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 2*len(want))
		n, _ := syscall.Read(int(r.Fd()), buf)
		if fi.Mode()&os.ModeNamedPipe == 0 || n != len(want) || !bytes.Equal(buf[:n], want) {
			t.Fatalf("get f %s (a FIFO with a reader) exited 0, and %s is now %v, its reader got %d bytes; want the FIFO kept and its reader getting f's %d bytes, as cp f %s does",
				fifo, fifo, fi.Mode(), n, len(want), fifo)
		}
	})

	t.Run("chardev", func(t *testing.T) {
		// A node for /dev/null's device (1, 3) where the test may make one.
		null := filepath.Join(dir, "null")
		if err := syscall.Mknod(null, syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
			t.Skipf("cannot make a device node here: %v", err)
		}
		if err := os.WriteFile(null, []byte("x"), 0o666); err != nil {
			t.Skipf("device nodes do not work here: %v", err)
		}
		var out, errb bytes.Buffer
		code := Main([]string{"get", "f", null, "--socket", sock}, &out, &errb)
		fi, err := os.Lstat(null)
		if err != nil {
			t.Fatal(err)
		}
		if code != 0 || fi.Mode()&os.ModeCharDevice == 0 {
			t.Fatalf("get f %s (a character device, as /dev/null): exit %d (%s), and %s is now %v; want exit 0 and the device node kept (its device written), as cp f %s does",
				null, code, errb.String(), null, fi.Mode(), null)
		}
	})
}

// TestGetNamesLocalWhenItCannotBeCreated: a LOCAL that cannot be made
// (its folder is missing, or not writable) is named in get's error as
// the user typed it. It named get's temporary beside it instead
// ("open /nonexistent/dir/.f.zonefold-get-3592658222: no such file or
// directory"), a file the user never asked for.
func TestGetNamesLocalWhenItCannotBeCreated(t *testing.T) {
	device, sock, local := deviceAndLocalFile(t, "abc")
	stop := serveInProcess(t, device, sock)
	defer stop()
	zonefold(t, "put", local, "f", "--socket", sock)
	dst := filepath.Join(t.TempDir(), "missing", "f")
	var out, errb bytes.Buffer
	code := Main([]string{"get", "f", dst, "--socket", sock}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), dst+":") || strings.Contains(errb.String(), "zonefold-get-") {
		t.Fatalf("get into a missing folder: exit %d, %q; want exit 1 naming %s, not a temporary", code, errb.String(), dst)
	}
}
