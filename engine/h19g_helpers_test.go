package engine

import (
	"bytes"
	"encoding/binary"
	"os"
	"runtime"
	"sort"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/uring"
	"github.com/zonefold/zonefold/zns"
)

// h19gBounded runs fn and fails the test, with every goroutine's stack,
// if it does not return within d: Open, fsck and reads must not hang on
// any device content.
func h19gBounded(t *testing.T, what string, d time.Duration, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(d):
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		os.Stderr.Write(buf[:n])
		t.Fatalf("%s did not return within %v (goroutines above)", what, d)
	}
}

// h19gOpen opens devName within a bound; it returns the engine or the error.
func h19gOpen(t *testing.T, devName string) (*Engine, error) {
	t.Helper()
	var e *Engine
	var err error
	h19gBounded(t, "Open", time.Minute, func() { e, err = Open(devName, smallConfig()) })
	return e, err
}

// h19gFsck runs Fsck on devName within a bound.
func h19gFsck(t *testing.T, devName string) (*FsckReport, error) {
	t.Helper()
	var rep *FsckReport
	var err error
	h19gBounded(t, "Fsck", time.Minute, func() {
		dev, oerr := zns.Open(devName, zns.Options{})
		if oerr != nil {
			err = oerr
			return
		}
		defer dev.Close()
		rep, err = Fsck(dev)
	})
	return rep, err
}

// h19gAligned copies p into page-aligned memory (what writeZone takes).
func h19gAligned(t *testing.T, p []byte) []byte {
	t.Helper()
	buf, err := unix.Mmap(-1, 0, len(p), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(buf) })
	copy(buf, p)
	return buf
}

// h19gFreeZone is a data zone nothing was written to.
func h19gFreeZone(t *testing.T, e *Engine) int {
	t.Helper()
	var free []int
	for _, z := range e.zones {
		if z != nil && z.state.Load() == zoneFree && z.alloc.Load() == 0 {
			free = append(free, z.idx)
		}
	}
	if len(free) == 0 {
		t.Fatal("no free data zone")
	}
	sort.Ints(free)
	return free[len(free)-1]
}

// h19gCraftRecord writes a record (header h with valid checksum, then
// data) at the start of a free data zone, durably, as a device that holds
// it would.
func h19gCraftRecord(t *testing.T, e *Engine, h *RecordHeader, data []byte) {
	t.Helper()
	h.FS = e.sb.FS()
	rec := make([]byte, BlockSize+len(data))
	// EncodeHeader refuses numbers and sizes zonefold never writes: it
	// encodes sane ones, and the crafted ones go in after, with the
	// checksum made again.
	crafted := *h
	h.Seq, h.File, h.Size = 1, 1, 0
	err := EncodeHeader(h, rec)
	h.Seq, h.File, h.Size = crafted.Seq, crafted.File, crafted.Size
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	le.PutUint64(rec[8:], h.Seq)
	le.PutUint64(rec[16:], h.File)
	le.PutUint64(rec[24:], h.Size)
	le.PutUint32(rec[BlockSize-4:], Checksum(rec[:BlockSize-4]))
	copy(rec[BlockSize:], data)
	writeRaw(t, e, h19gFreeZone(t, e), 0, rec)
	if err := emuOf(t, e).Flush(); err != nil {
		t.Fatal(err)
	}
}

// h19gCraftCheckpoint appends checkpoint c, checksummed, to the active
// metadata half's log, durably: the newest checkpoint on the device.
func h19gCraftCheckpoint(t *testing.T, e *Engine, c *checkpointState) {
	t.Helper()
	payload := encodeCheckpoint(c)
	rec := make([]byte, metaRecordLen(len(payload)))
	encodeMeta(rec, e.sb.FS(), metaCheckpoint, c.seq, payload)
	m := e.meta
	if err := e.writeMeta(m.active, m.wp, h19gAligned(t, rec), uring.NewWaiter()); err != nil {
		t.Fatal(err)
	}
	m.wp += int64(len(rec))
	if err := emuOf(t, e).Flush(); err != nil {
		t.Fatal(err)
	}
}

// h19gBase formats a device with file "a" holding 64 KiB, fsynced.
func h19gBase(t *testing.T) (string, *Engine, []byte) {
	t.Helper()
	devName := emuDevice(t, 16, "1M", "")
	e := formatOpen(t, devName, smallConfig())
	data := bytes.Repeat([]byte("h19g-a.."), 8<<10)
	h := createSynced(t, e, "a", data)
	h.Close()
	return devName, e, data
}
