package cache

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestBuddy allocates and frees at random over arenas that are and are
// not multiples of 2 MiB: blocks are aligned, never overlap, stay in the
// arena, and everything merges back at the end.
func TestBuddy(t *testing.T) {
	for _, npages := range []int32{1, 3, 512, 700, 1536} {
		rng := rand.New(rand.NewPCG(uint64(npages), 7))
		b := newBuddy(npages)
		owner := make([]int, npages) // 0: free, else block id
		type block struct {
			p     int32
			order int
		}
		var live []block
		for i := range 5000 {
			if rng.IntN(2) == 0 || len(live) == 0 {
				order := rng.IntN(MaxOrder + 1)
				p, ok := b.alloc(order)
				if !ok {
					continue
				}
				if p%(1<<order) != 0 || p+1<<order > npages {
					t.Fatalf("npages %d: block %d order %d misplaced", npages, p, order)
				}
				for q := p; q < p+1<<order; q++ {
					if owner[q] != 0 {
						t.Fatalf("npages %d: page %d handed out twice", npages, q)
					}
					owner[q] = i + 1
				}
				live = append(live, block{p, order})
				continue
			}
			j := rng.IntN(len(live))
			blk := live[j]
			live[j] = live[len(live)-1]
			live = live[:len(live)-1]
			for q := blk.p; q < blk.p+1<<blk.order; q++ {
				owner[q] = 0
			}
			b.free(blk.p, blk.order)
		}
		for _, blk := range live {
			b.free(blk.p, blk.order)
		}
		if b.free64() != int64(npages) {
			t.Fatalf("npages %d: %d pages free after freeing all", npages, b.free64())
		}
		if got, want := freeBlocks(b), freeBlocks(newBuddy(npages)); got != want {
			t.Errorf("npages %d: free blocks by order %v after freeing all, want merged %v", npages, got, want)
		}
	}
}

// freeBlocks counts the free blocks of each order.
func freeBlocks(b *buddy) [MaxOrder + 1]int {
	var n [MaxOrder + 1]int
	for k := range n {
		for p := b.head[k]; p >= 0; p = b.next[p] {
			n[k]++
		}
	}
	return n
}

// TestArenaResident: a new cache's arena is resident before the first
// write, so no write pays for faulting it in.
func TestArenaResident(t *testing.T) {
	c, err := New(Config{Bytes: 8<<20 + 12<<10})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	vec := make([]byte, (len(c.arena)+pageSize-1)/pageSize)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&c.arena[0])),
		uintptr(len(c.arena)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatalf("mincore: %v", errno)
	}
	missing := 0
	for _, v := range vec {
		if v&1 == 0 {
			missing++
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d arena pages not resident after New", missing, len(vec))
	}
}
