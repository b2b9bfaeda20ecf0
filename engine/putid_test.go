package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/uring"
)

// zonefold put is a temporary file created, written, fsynced and renamed
// over its name; the daemon removes temporaries left when it starts. The
// kill -9 loop lost puts that way ("put.10: 391008 bytes, equal false",
// and at the next kill point "put.10 is gone"): the create of a put's
// temporary that was logged but not flushed when the daemon died reached
// the metadata zone past its write pointer. Recovery did not see it, so
// its file id and sequence number were handed out again, to the next
// put's temporary; when the metadata zone was finished, the emulator
// showed the lost record, and the next recovery replayed it (it took
// operations from both metadata zones) among the new put's operations:
// the put's records went to the lost create's file, and the daemon's
// removal of the lost temporary, by id, took the put with it.
//
// Each subtest numbers the lost create at a different place among the
// new put's operations and records.
func TestLostTemporaryCreateNeverTakesAPut(t *testing.T) {
	for after := range 6 {
		t.Run(fmt.Sprint(after), func(t *testing.T) {
			devName := emuDevice(t, 16, "256K", "")
			cfg := smallConfig()
			cfg.GC.Disabled = true
			e := formatOpen(t, devName, cfg)
			// The lost create: the id the next create gets, a number
			// taken before the kill (recovery hands out the ones
			// after what it saw again).
			m := e.meta
			zone, off := e.sb.metaAt(m.active, m.wp)
			lost := nsOp{kind: opCreate, file: e.nextID, name: "tmp.lost"}
			payload := encodeOp(lost)
			rec := make([]byte, metaRecordLen(len(payload)))
			encodeMeta(rec, e.sb.FS(), metaOp, e.seq.Load()+2+uint64(after), payload)
			e.crashForTest()
			buf, err := unix.Mmap(-1, 0, len(rec), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
			if err != nil {
				t.Fatal(err)
			}
			copy(buf, rec)
			if err := e.writeZone(zone, off, buf, uring.NewWaiter()); err != nil {
				t.Fatal(err)
			}
			unix.Munmap(buf)
			emu := emuOf(t, e)
			if err := emu.PowerCut(); err != nil { // the kill: the record was never flushed
				t.Fatal(err)
			}
			emu.Close()

			// The daemon starts again and a put runs.
			e = reopen(t, devName, cfg)
			content := bytes.Repeat([]byte("put!"), 100000)
			h, err := e.OpenFile("tmp.new", OCreate|OExcl)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := h.WriteAt(content, 0); err != nil {
				t.Fatal(err)
			}
			if err := h.Sync(); err != nil {
				t.Fatal(err)
			}
			h.Close()
			if err := e.Rename("tmp.new", "put"); err != nil {
				t.Fatal(err)
			}
			check := func(when string) {
				t.Helper()
				if _, err := e.Stat("put"); err != nil {
					t.Fatalf("%s: put: %v (files %v)", when, err, e.List())
				}
				if got := readAll(t, e, "put"); !bytes.Equal(got, content) {
					t.Fatalf("%s: put has %d bytes, equal %v; acknowledged %d", when, len(got), bytes.Equal(got, content), len(content))
				}
				if _, err := e.Stat("tmp.lost"); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("%s: the lost create came back: %v", when, err)
				}
			}
			check("after the put")
			cut := func() {
				e.crashForTest()
				emu := emuOf(t, e)
				if err := emu.PowerCut(); err != nil {
					t.Fatal(err)
				}
				emu.Close()
				e = reopen(t, devName, cfg)
			}
			// Killed, restarted: the daemon removes temporaries.
			cut()
			for _, fi := range e.List() {
				if strings.HasPrefix(fi.Name, "tmp.") {
					if err := e.Remove(fi.Name); err != nil {
						t.Fatal(err)
					}
				}
			}
			check("after the second start")
			cut()
			check("after the third start")
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			checkFsck(t, devName)
		})
	}
}
