package server

import "sync/atomic"

// ClientSocketFD is c's socket descriptor, for tests that look at what
// is queued for it (SIOCINQ) or poll it for a pending reset, without
// reading.
func ClientSocketFD(c *Client) int {
	fd := -1
	if rc, err := c.uc.SyscallConn(); err == nil {
		rc.Control(func(d uintptr) { fd = int(d) })
	}
	return fd
}

// RingRepliesPublished is how many replies the daemon has published on
// c's completion ring that c has not consumed (rings only).
func RingRepliesPublished(c *Client) uint32 {
	return atomic.LoadUint32(c.ring.cqTail) - c.ring.head
}

// AwaitProgress is awaitProgress, for the external tests.
var AwaitProgress = awaitProgress
