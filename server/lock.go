package server

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// One daemon per device and per socket. Both are enforced with flock(2)
// rather than pid files or probing: the kernel drops a flock when its
// holder dies, even by SIGKILL, so a crashed daemon never leaves a lock
// that needs cleaning up, and taking one is atomic, so two daemons
// starting at once cannot both win.
//
//   - The device: the emu file or the device node itself is locked, so two
//     daemons on one device are refused whatever sockets they use. Taking
//     or failing to take this lock reads nothing from the device: it may
//     be a whole namespace.
//   - The socket: a socket file cannot be locked usefully (binding
//     replaces nothing, and removing a live daemon's socket would strand
//     it), so the lock is on PATH.lock next to it. Whoever holds that lock
//     owns PATH and may remove a socket file a dead daemon left behind. The
//     holder removes PATH.lock before it lets go, and a new holder checks
//     that the file it locked is still the one at PATH.lock (else it tries
//     again), so that removing it never lets two daemons in.

// flockNB takes an exclusive flock on f without waiting.
func flockNB(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// lockSocketFile creates and locks path (PATH.lock) for the socket what
// names, and writes this process's pid into it for the error a second
// daemon gets.
func lockSocketFile(path, what string) (*os.File, error) {
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o644)
		if err != nil {
			return nil, fmt.Errorf("server: lock %s: %w", what, err)
		}
		if err := flockNB(f); err != nil {
			holder := lockHolder(f)
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, fmt.Errorf("server: another zonefold daemon%s is serving %s (%s is locked)", holder, what, path)
			}
			return nil, fmt.Errorf("server: lock %s: %w", path, err)
		}
		// The previous holder may have removed path between our open and
		// our lock: then this lock guards a file nobody else can find.
		if same, err := isPath(f, path); err != nil {
			f.Close()
			return nil, fmt.Errorf("server: lock %s: %w", path, err)
		} else if !same {
			f.Close()
			continue
		}
		// The pid is only for the error message above.
		_ = f.Truncate(0)
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		return f, nil
	}
}

// lockHolder reads the pid a lock file's holder wrote, as " (pid N)", or
// "" if it holds none. It reads a few bytes at most, whatever the file.
func lockHolder(f *os.File) string {
	var b [24]byte
	n, _ := f.ReadAt(b[:], 0)
	if pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n]))); err == nil && pid > 0 {
		return fmt.Sprintf(" (pid %d)", pid)
	}
	return ""
}

// isPath tells whether f is the file at path now.
func isPath(f *os.File, path string) (bool, error) {
	var held, now unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &held); err != nil {
		return false, err
	}
	if err := unix.Lstat(path, &now); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, err
	}
	return held.Dev == now.Dev && held.Ino == now.Ino, nil
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

// DeviceLock is a process's claim on its device: the daemon's, or that of
// a command that must not run beside one (format, fsck, zone management).
type DeviceLock struct {
	f       *os.File
	anchor  *os.File // a device node's device, locked whatever node names it (lockAnchor)
	created string   // an emu file this lock created
}

// LockDevice claims device for this process; a second claim, from this
// process or another, fails until Release. Only regular files and block
// devices are accepted (a FIFO would block the open, a character device
// is not storage). An emu file that does not exist yet is created (empty)
// so that it can be locked before the backend grows it; Abandon removes
// it again, so that a command that fails leaves no file behind.
func LockDevice(device string) (*DeviceLock, error) {
	path := devicePath(device)
	if path == "" {
		return &DeviceLock{}, nil
	}
	emu := strings.HasPrefix(device, "emu:")
	f, anchor, err := lockDeviceFile(path, emu)
	if err == nil {
		return &DeviceLock{f: f, anchor: anchor}, nil
	}
	if !errors.Is(err, fs.ErrNotExist) || !emu {
		return nil, err
	}
	nf, cerr := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o644)
	if cerr != nil {
		if errors.Is(cerr, fs.ErrExist) {
			// Someone created it meanwhile: lock it as it is.
			if f, anchor, err = lockDeviceFile(path, emu); err != nil {
				return nil, err
			}
			return &DeviceLock{f: f, anchor: anchor}, nil
		}
		return nil, fmt.Errorf("server: create %s: %w", path, cerr)
	}
	if err := flockNB(nf); err != nil {
		// Someone else locked the file we just made: theirs now.
		nf.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, inUse(path)
		}
		return nil, fmt.Errorf("server: lock device %s: %w", path, err)
	}
	return &DeviceLock{f: nf, created: path}, nil
}

func inUse(path string) error {
	return fmt.Errorf("server: device %s is in use: another zonefold daemon or command (format, fsck, zones, bench) holds it (%s is locked)", path, path)
}

// lockDeviceFile opens path without reading from it and locks it; emu
// says whether it is to hold an emulated device. A device node's device
// is locked too (anchor, nil for a regular file): the node's own lock
// is its inode's, and a second node of the same device (mknod, a
// container's /dev) locked another inode, so a second daemon served the
// device and format erased it under the first.
func lockDeviceFile(path string, emu bool) (f, anchor *os.File, err error) {
	// O_NONBLOCK: opening a FIFO for reading would wait for a writer.
	f, err = os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("server: lock device %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("server: lock device %s: %w", path, err)
	}
	if err := checkDeviceMode(path, st.Mode(), emu); err != nil {
		f.Close()
		return nil, nil, err
	}
	if err := flockNB(f); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, nil, inUse(path)
		}
		return nil, nil, fmt.Errorf("server: lock device %s: %w", path, err)
	}
	if anchor, err = lockAnchor(path, st); err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, anchor, nil
}

// lockAnchor locks the device behind the device node at path (st): its
// directory in sysfs, one inode however many nodes name the device. An
// NVMe generic node (/dev/ngXnY) is locked as its namespace's block
// device (nvmeXnY, beside it in sysfs) where there is one, so that
// /dev/ng0n1 and /dev/nvme0n1 are one claim. Nil for a regular file,
// and for a device sysfs does not show (then the node's lock is all).
func lockAnchor(path string, st fs.FileInfo) (*os.File, error) {
	m := st.Mode()
	if m&fs.ModeDevice == 0 {
		return nil, nil
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, nil
	}
	kind := "block"
	if m&fs.ModeCharDevice != 0 {
		kind = "char"
	}
	dir, err := filepath.EvalSymlinks(fmt.Sprintf("/sys/dev/%s/%d:%d", kind, unix.Major(sys.Rdev), unix.Minor(sys.Rdev)))
	if err != nil {
		return nil, nil
	}
	if base := filepath.Base(dir); kind == "char" && strings.HasPrefix(base, "ng") {
		if ns := filepath.Join(filepath.Dir(dir), "nvme"+strings.TrimPrefix(base, "ng")); exists(filepath.Join(ns, "dev")) {
			dir = ns
		}
	}
	a, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil
	}
	if err := flockNB(a); err != nil {
		a.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("server: device %s is in use: another zonefold daemon or command (format, fsck, zones, bench) holds it through another device node (%s is locked)", path, dir)
		}
		// A sysfs that refuses flock (none seen) leaves the node's
		// own lock, as a device sysfs does not show does: the
		// anchor adds to the claim, it never stands in its way.
		return nil, nil
	}
	return a, nil
}

// exists says whether path exists.
func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// checkDeviceMode refuses what cannot hold a zoned device: an emulated
// one lives on a regular file or a block device; a device node is a block
// device or a character device (NVMe passthrough), which the backend
// checks further.
func checkDeviceMode(path string, m fs.FileMode, emu bool) error {
	block := m&fs.ModeDevice != 0 && m&fs.ModeCharDevice == 0
	switch {
	case emu && (m.IsRegular() || block):
		return nil
	case emu:
		return fmt.Errorf("server: emu %s is a %s, not a regular file or a block device", path, modeName(m))
	case block || m&fs.ModeCharDevice != 0 || m.IsRegular():
		return nil // zns.Open says what it makes of a regular file
	}
	return fmt.Errorf("server: device %s is a %s, not a device", path, modeName(m))
}

func modeName(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	}
	return "special file"
}

// Release drops the claim. An emu file the claim created stays if the
// backend grew it (it is a device now), and is removed if still empty.
func (l *DeviceLock) Release() { l.release(false) }

// Abandon drops the claim of a holder that failed to make a device of
// it: an emu file the claim created is removed, whatever it holds (the
// backend may have grown it and written its header already).
func (l *DeviceLock) Abandon() { l.release(true) }

func (l *DeviceLock) release(abandon bool) {
	if l == nil || l.f == nil {
		return
	}
	if l.created != "" {
		if st, err := l.f.Stat(); abandon || err == nil && st.Size() == 0 {
			os.Remove(l.created)
		}
	}
	l.f.Close()
	l.f = nil
	if l.anchor != nil {
		l.anchor.Close()
		l.anchor = nil
	}
}

// MaxSocketPath is the longest socket path the daemon listens on and the
// client dials, in bytes: a sockaddr_un's sun_path holds 108 bytes, and
// a C client (fio's engine) needs one of them for the path's NUL.
const MaxSocketPath = 107

// checkSocketPath refuses a path no Unix socket can have, before anything
// is made for it: past sun_path the kernel's answer is a bare EINVAL
// ("bind: invalid argument"), which names neither the path nor the cause.
func checkSocketPath(path string) error {
	switch {
	case path == "":
		return errors.New("empty socket path")
	case len(path) > MaxSocketPath:
		return fmt.Errorf("socket path %s is %d bytes long; a Unix socket's path holds at most %d: choose a shorter one (a relative path counts from the working directory)", path, len(path), MaxSocketPath)
	}
	return nil
}

// Listener is the daemon's Unix socket (SOCK_SEQPACKET) and its lock.
type Listener struct {
	*net.UnixListener
	unlock func() // removes and releases PATH.lock
}

// Listen claims path for this daemon and listens on it. A socket file a
// dead daemon left is replaced; any other file at path is refused.
func Listen(path string) (*Listener, error) {
	if err := checkSocketPath(path); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	lockPath := path + ".lock"
	lock, err := lockSocketFile(lockPath, "socket "+path)
	if err != nil {
		return nil, err
	}
	unlock := func() {
		os.Remove(lockPath) // while still holding it: see isPath
		lock.Close()
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&fs.ModeSocket == 0 {
			unlock()
			return nil, fmt.Errorf("server: %s exists and is not a socket; refusing to replace it", path)
		}
		if listening(path) {
			unlock()
			return nil, fmt.Errorf("server: socket %s is in use: another program listens on it; refusing to replace it (choose another --socket)", path)
		}
		if err := os.Remove(path); err != nil {
			unlock()
			return nil, fmt.Errorf("server: remove stale socket: %w", err)
		}
	}
	ul, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		unlock()
		return nil, fmt.Errorf("server: listen: %w", err)
	}
	ul.SetUnlinkOnClose(true)
	return &Listener{UnixListener: ul, unlock: unlock}, nil
}

// listening says whether anything is bound to the socket file at path.
// Only a socket nothing holds (a dead daemon's) refuses a connect with
// ECONNREFUSED. The probe is a datagram socket's connect, which a
// stream or seqpacket listener answers with EPROTOTYPE and a datagram
// one takes without anything reaching its owner: no connection is made
// that the other program would have to accept.
func listening(path string) bool {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	err = unix.Connect(fd, &unix.SockaddrUnix{Name: path})
	return !errors.Is(err, unix.ECONNREFUSED) && !errors.Is(err, unix.ENOENT)
}

// Close stops listening, removes the socket file, then the lock file, and
// releases the lock (in that order, so that a successor never sees our
// socket file, and one that opened the lock file before we removed it
// sees that it is gone and starts over).
func (l *Listener) Close() error {
	err := l.UnixListener.Close()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	if l.unlock != nil {
		l.unlock()
		l.unlock = nil
	}
	return err
}
