package server

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// bytesRead is what this process has read so far (rchar in /proc/self/io:
// every read(2)-like call, whatever the file).
func bytesRead(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/io")
	if err != nil {
		t.Skipf("no /proc/self/io: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "rchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("/proc/self/io has no rchar")
	return 0
}

// A refused claim used to read the whole device into memory (for a pid
// it never used): 64 MiB here, a whole namespace on a real device.
func TestRefusedDeviceClaimReadsNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 20); err != nil { // sparse
		t.Fatal(err)
	}
	f.Close()
	dev := "emu:" + path
	lock, err := LockDevice(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	before := bytesRead(t)
	_, err = LockDevice(dev)
	read := bytesRead(t) - before
	if read > 64<<10 {
		t.Fatalf("the refused claim read %d bytes; want none of the device", read)
	}
	if err == nil || !strings.Contains(err.Error(), "is in use: another zonefold daemon or command") {
		t.Fatalf("second claim: %v", err)
	}
}

// A FIFO as the emu path used to hang the claim (open for reading waits
// for a writer) with no message.
func TestDeviceClaimRefusesAFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		l, err := LockDevice("emu:" + path + "?zone_size=1M&zones=8")
		l.Release()
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "is a FIFO, not a regular file or a block device") {
			t.Fatalf("claim of a FIFO: %v", err)
		}
	case <-time.After(10 * time.Second):
		// Unblock the open so that the test ends.
		w, _ := os.OpenFile(path, os.O_WRONLY, 0)
		defer w.Close()
		t.Fatal("claim of a FIFO hangs")
	}
	if _, err := LockDevice("emu:" + t.TempDir()); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Fatalf("claim of a directory: %v", err)
	}
}

// An emu file the claim created goes away again if the holder abandons
// it (a failed serve left a grown file), or if nothing grew it.
func TestDeviceClaimRemovesTheFileItCreated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev")
	dev := "emu:" + path + "?zone_size=1M&zones=8"
	exists := func() bool { _, err := os.Stat(path); return err == nil }
	l, err := LockDevice(dev)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("grown by the backend"), 0o644); err != nil {
		t.Fatal(err)
	}
	l.Abandon()
	if exists() {
		t.Fatal("an abandoned emu file the claim created stays")
	}
	if l, err = LockDevice(dev); err != nil {
		t.Fatal(err)
	}
	l.Release()
	if exists() {
		t.Fatal("an empty emu file the claim created stays")
	}
	if l, err = LockDevice(dev); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("a device"), 0o644); err != nil {
		t.Fatal(err)
	}
	l.Release()
	if !exists() {
		t.Fatal("a grown emu file was removed on release")
	}
	// A file the claim did not create is never removed.
	if l, err = LockDevice(dev); err != nil {
		t.Fatal(err)
	}
	l.Abandon()
	if !exists() {
		t.Fatal("an existing emu file was removed")
	}
}

// The socket's lock file used to stay behind after every daemon, and after
// a refused start.
func TestSocketLockLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "zf.sock")
	l, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(sock); err == nil || !strings.Contains(err.Error(), "(pid "+strconv.Itoa(os.Getpid())+") is serving socket") {
		t.Fatalf("second listener: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(sock); err == nil || !strings.Contains(err.Error(), "is not a socket") {
		t.Fatalf("listen over a regular file: %v", err)
	}
	os.Remove(sock)
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}
	// A lock file a killed daemon left is taken over and removed.
	if err := os.WriteFile(sock+".lock", []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if l, err = Listen(sock); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}
}
