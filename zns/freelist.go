package zns

import "sync"

// freeList hands out preallocated per-I/O structs so that the submit path
// does not allocate: it only allocates when more are in flight than ever
// before, and keeps what it made.
type freeList[T any] struct {
	mu    sync.Mutex
	items []*T
}

func newFreeList[T any](n int) *freeList[T] {
	f := &freeList[T]{items: make([]*T, 0, n)}
	for range n {
		f.items = append(f.items, new(T))
	}
	return f
}

func (f *freeList[T]) get() *T {
	f.mu.Lock()
	if n := len(f.items); n > 0 {
		x := f.items[n-1]
		f.items = f.items[:n-1]
		f.mu.Unlock()
		return x
	}
	f.mu.Unlock()
	return new(T)
}

func (f *freeList[T]) put(x *T) {
	f.mu.Lock()
	f.items = append(f.items, x)
	f.mu.Unlock()
}
