package cache

import (
	"strings"
	"testing"
)

// TestCheckSize: sizes outside what the arena can be are refused in a
// person's units, and so is a cache above the machine's memory: the
// arena is faulted in when the cache is made, so such a cache fails to
// map or has the OOM killer end the process while it is faulted in.
func TestCheckSize(t *testing.T) {
	avail, total, ok := memAvailable()
	if !ok {
		t.Skip("no MemAvailable/MemTotal in /proc/meminfo")
	}
	if avail <= 0 || avail > total {
		t.Fatalf("memAvailable: %d available of %d", avail, total)
	}
	for _, tc := range []struct {
		n    int64
		want string // "" for accepted
	}{
		{-1, "-1 B: want at least 4 KiB and less than 8 TiB"},
		{0, "0 B: want at least 4 KiB"},
		{4095, "4095 B: want at least 4 KiB"},
		{4096, ""},
		{1 << 20, ""},
		{MaxBytes + 4095, "memory"}, // rounds down to MaxBytes: in range
		{MaxBytes + 4096, "8 TiB: want at least 4 KiB and less than 8 TiB"},
		{100 << 40, "100 TiB: want"},
		{total + 4096, "more than the memory available"},
	} {
		err := CheckSize(tc.n)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckSize(%d): %v, want accepted", tc.n, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("CheckSize(%d): %v, want an error with %q", tc.n, err, tc.want)
		}
	}
}
