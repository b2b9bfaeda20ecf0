package uring

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// uringMapped is the bytes of io_uring mappings in this process.
func uringMapped(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var total int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "io_uring") {
			continue
		}
		lo, hi, _ := strings.Cut(strings.Fields(line)[0], "-")
		a, err1 := strconv.ParseUint(lo, 16, 64)
		b, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("maps line %q", line)
		}
		total += int64(b - a)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return total
}

// TestCloseUnmapsBigRings: opening and closing rings with 128-byte SQEs
// leaves no io_uring mapping behind (giouring's QueueExit unmaps 64 bytes
// per SQE, half of each big ring's SQE array stayed mapped).
func TestCloseUnmapsBigRings(t *testing.T) {
	for _, big := range []bool{false, true} {
		before := uringMapped(t)
		for range 50 {
			r, err := New(Options{Entries: 64, Big: big})
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if after := uringMapped(t); after > before {
			t.Errorf("big=%v: io_uring mappings grew from %d to %d bytes over 50 rings", big, before, after)
		}
	}
}
