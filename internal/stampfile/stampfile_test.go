package stampfile

import (
	"strings"
	"testing"
)

// TestCheck walks the model through writes, an fsync and crashes that
// leave each kind of block content, and checks which ones it accepts.
func TestCheck(t *testing.T) {
	const bs = 512
	tests := []struct {
		name    string
		block   int
		content func(blk []byte) // what the crash left in the block
		wantErr string
	}{
		{"initial stamp, never rewritten", 3, func(blk []byte) { Stamp(blk, 0, 3, 1) }, ""},
		{"the synced write", 0, func(blk []byte) { Stamp(blk, 0, 0, 3) }, ""},
		{"the newest synced of two", 1, func(blk []byte) { Stamp(blk, 0, 1, 3) }, ""},
		{"a write after the sync", 1, func(blk []byte) { Stamp(blk, 0, 1, 4) }, ""},
		{"an older synced write", 1, func(blk []byte) { Stamp(blk, 0, 1, 2) }, "fsync acknowledged 3"},
		{"the write the sync superseded", 0, func(blk []byte) { Stamp(blk, 0, 0, 1) }, "fsync acknowledged 3"},
		{"another block's content", 1, func(blk []byte) { Stamp(blk, 0, 2, 3) }, "intact false"},
		{"another file's content", 1, func(blk []byte) { Stamp(blk, 1, 1, 3) }, "intact false"},
		{"torn", 1, func(blk []byte) { Stamp(blk, 0, 1, 3); blk[100] ^= 1 }, "intact false"},
		{"zeros", 1, func(blk []byte) { clear(blk) }, "holds stamp 0"},
		{"a stamp never written", 1, func(blk []byte) { Stamp(blk, 0, 1, 9) }, "holds stamp 9"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := New("f", 0, 4, bs)
			var since []int
			k2, since := f.Begin(1, 1, since) // stamp 2, synced below
			k3, since := f.Begin(0, 2, since) // stamp 3, also synced
			f.Synced(since)
			k4, _ := f.Begin(1, 1, nil) // stamp 4, not synced
			if k2 != 2 || k3 != 3 || k4 != 4 {
				t.Fatalf("stamps %d %d %d, want 2 3 4", k2, k3, k4)
			}
			blk := make([]byte, bs)
			tc.content(blk)
			err := f.Check(tc.block, blk)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("rejected: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestCheckAdvancesDurable: once a crash showed a later stamp, the
// device holds it for good, so the next crash may not go back.
func TestCheckAdvancesDurable(t *testing.T) {
	f := New("f", 3, 1, 64)
	k, _ := f.Begin(0, 1, nil)
	blk := make([]byte, 64)
	f.Fill(blk, 0, 1, k)
	if err := f.Check(0, blk); err != nil {
		t.Fatal(err)
	}
	f.Fill(blk, 0, 1, 1)
	if err := f.Check(0, blk); err == nil {
		t.Fatal("the stamp from before the last crash's content was accepted")
	}
}
