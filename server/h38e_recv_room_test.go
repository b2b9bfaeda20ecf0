package server

import (
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestH38eRecvWithLittleRoomLosesNoReply: a socket-framing Recv given
// fewer places than the message it reads holds replies returns what
// fits and keeps the rest for the next Recv, as the rings do. The
// daemon's side is a socketpair the test writes one message of three
// replies to, so that they arrive together whatever the timing.
//
// Before the fix the Recv failed with "zonefold: reply message of 96
// bytes" and the three replies were gone: the requests' callers waited
// for them for ever.
func TestH38eRecvWithLittleRoomLosesNoReply(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		nc, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return nc.(*net.UnixConn)
	}
	uc, daemon := conn(fds[0]), conn(fds[1])
	defer daemon.Close()
	c := &Client{uc: uc, sock: uc, rbuf: make([]byte, (MaxBatch+1)*ReplySize)}
	defer c.Close()
	msg := make([]byte, 3*ReplySize)
	for i := range 3 {
		(&Reply{Tag: uint64(i + 1), Val: uint64(10 * (i + 1))}).Encode(msg[i*ReplySize:])
	}
	if _, err := daemon.Write(msg); err != nil {
		t.Fatal(err)
	}
	var tags []uint64
	for len(tags) < 3 {
		var one [1]Reply
		n, err := c.Recv(one[:])
		if err != nil {
			t.Fatalf("Recv with room for one reply, after tags %v: %v", tags, err)
		}
		if n != 1 || one[0].Val != 10*one[0].Tag {
			t.Fatalf("Recv with room for one: %d replies, %+v", n, one[0])
		}
		tags = append(tags, one[0].Tag)
	}
	if tags[0] != 1 || tags[1] != 2 || tags[2] != 3 {
		t.Fatalf("tags %v, want [1 2 3]", tags)
	}
	if _, err := c.Recv(nil); err == nil {
		t.Fatal("Recv with no room at all succeeded")
	}
}
