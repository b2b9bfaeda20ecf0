package engine

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// TestH43hHiddenLogRecordWithAnUnreadableHeaderRefuses: as
// TestH43fHiddenLogRecordWithAnUnreadableBlockRefuses, but the block
// that fails to read is the pack's first, its header. Nothing beyond the
// damaged checkpoint then reads as a record numbered above the older
// one; what the unreadable block held may be, and recovering from the
// older checkpoint would lose it. scanBlocks passed over the block, so
// laterMeta found nothing and Open went on without the creates, silently
// (before session 43 the read's EIO failed Open). Open must refuse and
// name the half, the offset and the medium; fsck, whose recovery is
// Open's, says the same.
func TestH43hHiddenLogRecordWithAnUnreadableHeaderRefuses(t *testing.T) {
	h41bFormat(t, superPackVersion)
	devName := emuDevice(t, 16, "256K", "")
	e := formatOpen(t, devName, smallConfig())
	half := e.meta.active
	ckptAt := h43fMetaDev(e, half, BlockSize)
	pack, ops := h43fBigPack(e)
	off := e.meta.wp
	at := h41bLogRecords(t, e, pack)
	if err := e.dev.Flush(); err != nil {
		t.Fatal(err)
	}
	h41bCrash(t, e)
	h41bPatch(t, devName, ckptAt+8, make([]byte, 8)) // the newest checkpoint fails its checksum
	e, _, err := h43fOpenBad(t, devName, at, at+BlockSize)
	if err == nil {
		lost := h41bHas(t, e, ops[0].name)[ops[0].name]
		e.Close()
		t.Fatalf("Open with the newest checkpoint damaged and, after it, an unreadable block where a pack numbered above the older one begins: no error (first create present: %v)", lost)
	}
	t.Logf("Open: %v", err)
	if !errors.Is(err, syscall.EIO) {
		t.Errorf("Open's error does not wrap EIO: %v", err)
	}
	h43hWantSays(t, "Open's error", err.Error(), half, off)
	// fsck sees what Open sees: its recovery is Open's.
	h43hWantSays(t, "fsck's problems", strings.Join(h43hFsckBad(t, devName, at, at+BlockSize), "\n"), half, off)
}

// h43hFsckBad runs fsck on devName through a device whose reads of
// [lo, hi) fail (bad media) and returns its problems.
func h43hFsckBad(t *testing.T, devName string, lo, hi int64) []string {
	t.Helper()
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	rep, err := Fsck(&h39fBadRead{Emu: dev.(*zns.Emu), lo: lo, hi: hi})
	if err != nil {
		t.Fatal(err)
	}
	return rep.Problems
}

// h43hWantSays fails t unless msg names metadata half half, offset off,
// the medium's failure, the refusal and fsck.
func h43hWantSays(t *testing.T, what, msg string, half int, off int64) {
	t.Helper()
	for _, want := range []string{fmt.Sprintf("metadata half %d", half), fmt.Sprintf("at %d", off), "the medium failed the read", "refusing to open", "fsck"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%s does not say %q: %q", what, want, msg)
		}
	}
}

// TestH43hOlderHalfBadBlockBeforeOlderRecords: the half recovery does
// not start from is the older one (a checkpoint went to the other half
// since), its walk stops on a record that fails its checksum, and after
// it a block fails to read. With a whole record after that block, numbered
// below the checkpoint recovery starts from, the half's log was older
// there (it is written in order) and Open goes on; with none, what the
// block held may be newer, and Open refuses.
func TestH43hOlderHalfBadBlockBeforeOlderRecords(t *testing.T) {
	for _, after := range []bool{true, false} {
		t.Run(fmt.Sprintf("wholeAfter=%v", after), func(t *testing.T) {
			devName := emuDevice(t, 16, "256K", "")
			e := formatOpen(t, devName, smallConfig())
			half := e.meta.active
			recs := [][]byte{h41bOpRecord(e, nsOp{kind: opCreate, file: e.nextID, name: "cut"})}
			recs = append(recs, h41bOpRecord(e, nsOp{kind: opCreate, file: e.nextID + 1, name: "unreadable"}))
			if after {
				recs = append(recs, h41bOpRecord(e, nsOp{kind: opCreate, file: e.nextID + 2, name: "whole"}))
			}
			e.nextID += 3
			badOff := e.meta.wp + int64(len(recs[0]))
			cutAt := h41bLogRecords(t, e, recs...)
			badAt := cutAt + int64(len(recs[0]))
			e.nsMu.Lock()
			err := e.checkpoint()
			e.nsMu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			if e.meta.active == half {
				t.Fatal("set-up: the checkpoint did not go to the other half")
			}
			h41bCrash(t, e)
			h41bPatch(t, devName, cutAt+8, make([]byte, 8)) // "cut" fails its checksum
			e, _, err = h43fOpenBad(t, devName, badAt, badAt+BlockSize)
			if after {
				if err != nil {
					t.Fatalf("Open, a whole older record after the unreadable block: %v", err)
				}
				if err := e.Close(); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				e.Close()
				t.Fatal("Open, nothing readable after the unreadable block: no error")
			}
			t.Logf("Open: %v", err)
			h43hWantSays(t, "Open's error", err.Error(), half, badOff)
		})
	}
}
