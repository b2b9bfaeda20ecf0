package server

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// One daemon per device and per socket. Both are enforced with flock(2)
// rather than pid files or probing: the kernel drops a flock when its
// holder dies, even by SIGKILL, so a crashed daemon never leaves a lock
// that needs cleaning up, and taking one is atomic, so two daemons
// starting at once cannot both win.
//
//   - The device: the emu file or the device node itself is locked, so two
//     daemons on one device are refused whatever sockets they use.
//   - The socket: a socket file cannot be locked usefully (binding
//     replaces nothing, and removing a live daemon's socket would strand
//     it), so the lock is on PATH.lock next to it. Whoever holds that lock
//     owns PATH and may remove a socket file a dead daemon left behind.

// lockFile opens (creating) path and takes an exclusive flock on it
// without waiting. what names the thing guarded, for the error.
func lockFile(path, what string, create bool) (*os.File, error) {
	flags := os.O_RDONLY
	if create {
		flags = os.O_RDWR | os.O_CREATE
	}
	f, err := os.OpenFile(path, flags|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("server: lock %s: %w", what, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := ""
		if b, rerr := os.ReadFile(path); rerr == nil && create {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
				holder = fmt.Sprintf(" (pid %d)", pid)
			}
		}
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("server: another zonefold daemon%s is serving %s (%s is locked)", holder, what, path)
		}
		return nil, fmt.Errorf("server: lock %s: %w", path, err)
	}
	if create {
		// The pid is only for the error message above.
		_ = f.Truncate(0)
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// devicePath is the file a device string names, "" for devices without
// one (null:).
func devicePath(device string) string {
	switch {
	case strings.HasPrefix(device, "null:"):
		return ""
	case strings.HasPrefix(device, "emu:"):
		p, _, _ := strings.Cut(strings.TrimPrefix(device, "emu:"), "?")
		return p
	}
	return device
}

// DeviceLock is the daemon's claim on its device.
type DeviceLock struct {
	f       *os.File
	created string // an emu file this lock created, removed if still empty on release
}

// LockDevice claims device for this process; a second claim, from this
// process or another, fails until Release. An emu file that does not
// exist yet is created (empty) so that it can be locked before the
// backend grows it.
func LockDevice(device string) (*DeviceLock, error) {
	path := devicePath(device)
	if path == "" {
		return &DeviceLock{}, nil
	}
	what := "device " + path
	f, err := lockFile(path, what, false)
	if err == nil {
		return &DeviceLock{f: f}, nil
	}
	if !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(device, "emu:") {
		return nil, err
	}
	nf, cerr := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if cerr != nil {
		if errors.Is(cerr, fs.ErrExist) {
			// Someone created it meanwhile: lock it as it is.
			f, err = lockFile(path, what, false)
			if err != nil {
				return nil, err
			}
			return &DeviceLock{f: f}, nil
		}
		return nil, fmt.Errorf("server: create %s: %w", path, cerr)
	}
	nf.Close()
	if f, err = lockFile(path, what, false); err != nil {
		return nil, err
	}
	return &DeviceLock{f: f, created: path}, nil
}

// Release drops the claim.
func (l *DeviceLock) Release() {
	if l == nil || l.f == nil {
		return
	}
	if l.created != "" {
		if st, err := l.f.Stat(); err == nil && st.Size() == 0 {
			os.Remove(l.created)
		}
	}
	l.f.Close()
	l.f = nil
}

// Listener is the daemon's Unix socket (SOCK_SEQPACKET) and its lock.
type Listener struct {
	*net.UnixListener
	lock *os.File
	path string
}

// Listen claims path for this daemon and listens on it. A socket file a
// dead daemon left is replaced; any other file at path is refused.
func Listen(path string) (*Listener, error) {
	if path == "" {
		return nil, errors.New("server: empty socket path")
	}
	lock, err := lockFile(path+".lock", "socket "+path, true)
	if err != nil {
		return nil, err
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&fs.ModeSocket == 0 {
			lock.Close()
			return nil, fmt.Errorf("server: %s exists and is not a socket; refusing to replace it", path)
		}
		if err := os.Remove(path); err != nil {
			lock.Close()
			return nil, fmt.Errorf("server: remove stale socket: %w", err)
		}
	}
	ul, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("server: listen: %w", err)
	}
	ul.SetUnlinkOnClose(true)
	return &Listener{UnixListener: ul, lock: lock, path: path}, nil
}

// Close stops listening, removes the socket file and releases the lock
// (in that order, so that a successor never sees our socket file). The
// lock file stays: removing it would let one successor lock the unlinked
// file while another creates and locks a new one.
func (l *Listener) Close() error {
	err := l.UnixListener.Close()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	if l.lock != nil {
		l.lock.Close()
		l.lock = nil
	}
	return err
}
