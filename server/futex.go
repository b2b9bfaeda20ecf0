package server

import (
	"math"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Futex operations on a word of the shared region (linux/futex.h). The
// region is a shared mapping of a memfd, so these are the shared (not
// FUTEX_PRIVATE_FLAG) operations: the kernel keys them on the memfd and
// the offset, the same for every process that maps it.
const (
	futexWaitOp = 0
	futexWakeOp = 1
)

// futexWake wakes whoever waits on the word at addr. It never blocks,
// whatever the word holds, so it is a raw system call: it does not tell
// Go's scheduler that the thread enters the kernel. With the announced
// kind (Syscall6), a wake whose thread the kernel preempted for the
// woken client (wakeup preemption, the common case on a busy machine)
// looked to sysmon like a blocked system call: sysmon handed the
// thread's P to another thread, waking it, and the preempted thread had
// to win a P back when it returned. "Never blocks" has one exception:
// the word is in a shared mapping, and the kernel may have to fault its
// page in to find the futex; a shared-memory page swapped out could then
// block the thread on I/O while it holds its P, with no other thread
// given the P meanwhile. That is acceptable for a ring in constant use,
// whose pages stay resident.
func futexWake(addr *uint32) {
	unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakeOp, math.MaxInt32, 0, 0, 0)
}

// futexWait sleeps while the word at addr holds val, for at most d
// (d < 0: without a limit); it may return early (a wake, a signal, or
// the word changed).
func futexWait(addr *uint32, val uint32, d time.Duration) {
	if d < 0 {
		unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val), 0, 0, 0)
		return
	}
	ts := unix.NsecToTimespec(int64(d))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}
