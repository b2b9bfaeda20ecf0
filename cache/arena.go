package cache

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/internal/report"
)

const (
	pageShift = 12
	pageSize  = 1 << pageShift // the smallest folio: order 0
	// MaxOrder is the largest folio order: 2 MiB.
	MaxOrder = 9
	// chunkShift sizes the index's chunks: no folio crosses a 2 MiB
	// boundary, since folios are naturally aligned and at most 2 MiB.
	chunkShift = pageShift + MaxOrder
	chunkSize  = 1 << chunkShift
	// regionBytes is the size of one registered buffer: io_uring takes at
	// most 1 GiB per fixed buffer. A multiple of 2 MiB, so no folio
	// crosses two regions.
	regionBytes = 1 << 30
)

// MaxBytes is the largest cache: the buddy allocator numbers pages in 31
// bits.
const MaxBytes = (1<<31 - 1) * pageSize

// CheckSize says whether a cache of n bytes can be made here, in a line
// a person reads: at least a page, at most MaxBytes, and no more than
// the memory the machine (or this process's cgroup) has available now. The arena is
// faulted in when the cache is made, so a cache above what is available
// fails to map, or maps and has the kernel's OOM killer end the process
// (or another one) while it is faulted in. Checking first lets a caller
// refuse the size before it changes anything (serve --format --force
// erased the device before --cache 8T, a typo for 8G, failed). A size
// refused is a *SizeError.
func CheckSize(n int64) error {
	if n < pageSize || n&^(pageSize-1) > MaxBytes {
		// MaxBytes is a page short of 8 TiB: "8T" itself is refused,
		// and "want 4 KiB to 8 TiB" read as if it were taken.
		return &SizeError{Size: n, Why: "want at least 4 KiB and less than 8 TiB"}
	}
	avail, total, ok := memAvailable()
	if ok && n > avail {
		return &SizeError{Size: n, AboveMemory: true, Why: fmt.Sprintf("more than the memory available (%s of %s): the cache is held in memory from the start",
			report.Human(avail), report.Human(total))}
	}
	return nil
}

// SizeError is a cache size CheckSize refuses: outside what the arena
// can be, which is the caller's choice of size and so a command line's
// bad flag value, or above the memory available now (AboveMemory),
// which is the machine's state as much as the caller's choice.
type SizeError struct {
	Size        int64
	Why         string // "want ...", or what bounds it
	AboveMemory bool
}

func (e *SizeError) Error() string {
	size := report.Human(e.Size)
	if e.Size < pageSize {
		size = fmt.Sprintf("%d B", e.Size)
	}
	return fmt.Sprintf("cache: size %s: %s", size, e.Why)
}

// memAvailable reads MemAvailable and MemTotal from /proc/meminfo, and
// the limit of this process's cgroup (v2) where it is lower; ok is false
// where they cannot be read (nothing is refused then). prometheus/procfs
// parses both files.
func memAvailable() (avail, total int64, ok bool) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, 0, false
	}
	mi, err := fs.Meminfo()
	if err != nil || mi.MemAvailableBytes == nil || mi.MemTotalBytes == nil {
		return 0, 0, false
	}
	avail, total = int64(*mi.MemAvailableBytes), int64(*mi.MemTotalBytes)
	if limit, used, ok := cgroupMemory(fs); ok && limit-used < avail {
		avail, total = max(limit-used, 0), min(limit, total)
	}
	return avail, total, true
}

// cgroupMemory reads the memory limit of this process's cgroup and the
// anonymous memory charged to it (the page cache it is charged for is
// reclaimed for the arena, as MemAvailable counts it): v1's memory
// controller (memory.limit_in_bytes, total_rss in memory.stat) where it
// has one, else v2's memory.max and anon in memory.stat. ok is false
// where there is no limit ("max") or nothing to read.
func cgroupMemory(fs procfs.FS) (limit, used int64, ok bool) {
	self, err := fs.Self()
	if err != nil {
		return 0, 0, false
	}
	groups, err := self.Cgroups()
	if err != nil {
		return 0, 0, false
	}
	dir, limitFile, anonKey := "", "", ""
	for _, g := range groups {
		switch {
		case slices.Contains(g.Controllers, "memory"):
			dir, limitFile, anonKey = filepath.Join("/sys/fs/cgroup/memory", g.Path), "memory.limit_in_bytes", "total_rss"
		case g.HierarchyID == 0 && dir == "":
			dir, limitFile, anonKey = filepath.Join("/sys/fs/cgroup", g.Path), "memory.max", "anon"
		}
	}
	if dir == "" {
		return 0, 0, false
	}
	b, err := os.ReadFile(filepath.Join(dir, limitFile))
	if err != nil {
		return 0, 0, false
	}
	if limit, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil {
		return 0, 0, false
	}
	if b, err = os.ReadFile(filepath.Join(dir, "memory.stat")); err != nil {
		return 0, 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, found := strings.CutPrefix(line, anonKey+" "); found {
			used, err = strconv.ParseInt(v, 10, 64)
			return limit, used, err == nil
		}
	}
	return 0, 0, false
}

// mapArena maps the cache's memory: anonymous, private, asking for huge
// pages where the kernel has them (the page cache's folios live in the
// huge-mapped direct map, so this is the fair comparison), and faulted in
// before it is used. The page cache's memory is resident before the first
// write; an arena left to fault on first touch made each benchmark run pay
// for zeroing (and, in a VM, for the host's faults) inside the writes, a
// cost that swung from 0.1 s to 1.4 s per 256 MiB between identical runs.
func mapArena(bytes int64) ([]byte, error) {
	mem, err := unix.Mmap(-1, 0, int(bytes), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("cache: map %d-byte arena: %w", bytes, err)
	}
	_ = unix.Madvise(mem, unix.MADV_HUGEPAGE) // best effort: not every kernel has THP
	prefault(mem)
	return mem, nil
}

// prefaultStripe is the part of the arena one prefault worker takes at a
// time: a multiple of the 2 MiB huge page, so no huge page is split
// between workers.
const prefaultStripe = 64 << 20

// prefault makes every page of mem resident, writable and zeroed, with
// as many workers as there are CPUs (zeroing is the cost, and it is per
// CPU). MADV_POPULATE_WRITE (Linux 5.14) does it without touching the
// memory from user space; older kernels get a write to each page.
func prefault(mem []byte) {
	workers := min(runtime.GOMAXPROCS(0), (len(mem)+prefaultStripe-1)/prefaultStripe)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				lo := next.Add(prefaultStripe) - prefaultStripe
				if lo >= int64(len(mem)) {
					return
				}
				part := mem[lo:min(lo+prefaultStripe, int64(len(mem)))]
				if unix.Madvise(part, unix.MADV_POPULATE_WRITE) == nil {
					continue
				}
				for i := 0; i < len(part); i += pageSize {
					part[i] = 0
				}
			}
		})
	}
	wg.Wait()
}

// buddy is a binary buddy allocator over the arena's pages: blocks of
// 2^order pages, naturally aligned, orders 0..MaxOrder. The free lists are
// intrusive (links indexed by page), so nothing allocates.
type buddy struct {
	mu        sync.Mutex
	npages    int32
	head      [MaxOrder + 1]int32 // first free block of each order, -1 if none
	next      []int32             // free-list links by first page
	prev      []int32
	freeOrder []int8 // order of the free block that starts at a page, -1 if none
	freePages int64
}

func newBuddy(npages int32) *buddy {
	b := &buddy{
		npages:    npages,
		next:      make([]int32, npages),
		prev:      make([]int32, npages),
		freeOrder: make([]int8, npages),
	}
	for i := range b.head {
		b.head[i] = -1
	}
	for i := range b.freeOrder {
		b.freeOrder[i] = -1
	}
	// Carve the arena into the largest aligned blocks that fit: an arena
	// that is not a multiple of 2 MiB still uses every page.
	for p := int32(0); p < npages; {
		k := MaxOrder
		for k > 0 && (p&(1<<k-1) != 0 || p+1<<k > npages) {
			k--
		}
		b.push(p, k)
		b.freePages += 1 << k
		p += 1 << k
	}
	return b
}

func (b *buddy) push(p int32, k int) {
	b.freeOrder[p] = int8(k)
	b.prev[p] = -1
	b.next[p] = b.head[k]
	if b.head[k] >= 0 {
		b.prev[b.head[k]] = p
	}
	b.head[k] = p
}

func (b *buddy) remove(p int32, k int) {
	b.freeOrder[p] = -1
	if b.prev[p] >= 0 {
		b.next[b.prev[p]] = b.next[p]
	} else {
		b.head[k] = b.next[p]
	}
	if b.next[p] >= 0 {
		b.prev[b.next[p]] = b.prev[p]
	}
}

// alloc returns the first page of a free block of 2^order pages.
func (b *buddy) alloc(order int) (int32, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	j := order
	for j <= MaxOrder && b.head[j] < 0 {
		j++
	}
	if j > MaxOrder {
		return -1, false
	}
	p := b.head[j]
	b.remove(p, j)
	for j > order {
		j--
		b.push(p+1<<j, j)
	}
	b.freePages -= 1 << order
	return p, true
}

// free returns a block, merging it with its free buddies.
func (b *buddy) free(p int32, order int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.freePages += 1 << order
	for order < MaxOrder {
		q := p ^ (1 << order)
		if q+1<<order > b.npages || b.freeOrder[q] != int8(order) {
			break
		}
		b.remove(q, order)
		p = min(p, q)
		order++
	}
	b.push(p, order)
}

func (b *buddy) free64() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.freePages
}
