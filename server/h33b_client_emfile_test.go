package server_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/server"
)

// TestH33bClientOutOfDescriptorsForTheRegionSaysSo: a client process
// with a descriptor for its socket but none for the region's memfd the
// daemon passes it (the kernel drops it and sets MSG_CTRUNC) was told
// "hello reply without the region", which reads as a broken daemon. It
// must say that this process is out of descriptors (EMFILE).
func TestH33bClientOutOfDescriptorsForTheRegionSaysSo(t *testing.T) {
	d := newServe(t)
	// In a process of its own: in this one, another test closing a
	// descriptor between the count and the dial left the region one.
	out, err := execTestMain("emfile-client", d.socket).CombinedOutput()
	if err != nil {
		t.Fatalf("a client with no descriptor for its region: %v\n%s", err, out)
	}
	d.stop()
}

// emfileClient (TestMain's "emfile-client") dials socket with one
// descriptor left below its limit, which the socket takes, and reports
// whether the dial failed with EMFILE saying this process is out of
// descriptors (exit 0) or not (exit 1, and what it got).
func emfileClient(socket string) int {
	// The poller's descriptors first: the dial's socket would make them.
	r, w, err := os.Pipe()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer r.Close()
	defer w.Close()
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		fmt.Println(err)
		return 1
	}
	limit, err := secondFree(os.Getpid())
	if err != nil {
		fmt.Println(err)
		return 1
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: limit, Max: old.Max}); err != nil {
		fmt.Println("lower the descriptor limit:", err)
		return 1
	}
	c, err := server.Dial(context.Background(), socket, 1<<20)
	if err == nil {
		c.Close()
		fmt.Println("the dial succeeded with no descriptor left for the region")
		return 1
	}
	if !errors.Is(err, syscall.EMFILE) || !strings.Contains(err.Error(), "this process") {
		fmt.Printf("%v; want EMFILE saying this process is out of descriptors\n", err)
		return 1
	}
	return 0
}
