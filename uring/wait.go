package uring

import (
	"io"
	"sync"
	"sync/atomic"
	"syscall"
)

// Waiter is a reusable Completion for one operation at a time that a
// goroutine blocks on. Waiting has no context: an operation in flight owns
// its buffer until the kernel is done with it, so it cannot be abandoned.
type Waiter struct {
	ch chan Result
}

// NewWaiter returns a Waiter; keep and reuse it.
func NewWaiter() *Waiter { return &Waiter{ch: make(chan Result, 1)} }

// Complete implements Completion.
func (w *Waiter) Complete(res Result) { w.ch <- res }

// Wait flushes prepared SQEs (a plugged operation would otherwise never
// complete) and blocks until w's operation completes. It returns only
// then, even if the flush fails: the operation may be in the kernel, and
// one the kernel never took is completed with an error by the dead ring.
func (r *Ring) Wait(w *Waiter) Result {
	_ = r.Flush()
	return <-w.ch
}

// Group counts the completions of a set of operations and keeps the first
// failure. Add before submitting, then Wait.
type Group struct {
	wg    sync.WaitGroup
	errno atomic.Int32
	bytes atomic.Int64
}

// Add expects n more completions.
func (g *Group) Add(n int) { g.wg.Add(n) }

// Complete implements Completion.
func (g *Group) Complete(res Result) {
	if res.Res < 0 {
		g.errno.CompareAndSwap(0, -res.Res)
	} else {
		g.bytes.Add(int64(res.Res))
	}
	g.wg.Done()
}

// WaitGroup flushes prepared SQEs and waits for every expected completion,
// like Wait even if the flush fails. It returns the bytes transferred and
// the first failure, named op; the group is then ready for reuse.
func (r *Ring) WaitGroup(g *Group, op string) (int64, error) {
	_ = r.Flush()
	g.wg.Wait()
	n := g.bytes.Swap(0)
	if e := g.errno.Swap(0); e != 0 {
		return n, &OpError{Op: op, Errno: syscall.Errno(e)}
	}
	return n, nil
}

var waiters = sync.Pool{New: func() any { return NewWaiter() }}

// do submits one operation through submitFn and waits for it.
func (r *Ring) do(name string, submitFn func(c Completion) error) (Result, error) {
	w := waiters.Get().(*Waiter)
	defer waiters.Put(w)
	if err := submitFn(w); err != nil {
		return Result{}, err
	}
	res := r.Wait(w)
	return res, res.Err(name)
}

// ReadAt reads len(buf) bytes at off and waits. Like os.File.ReadAt it
// returns io.EOF when fewer bytes were there to read.
func (r *Ring) ReadAt(f File, buf []byte, off int64) (int, error) {
	res, err := r.do("read", func(c Completion) error { return r.Read(f, buf, uint64(off), c) })
	if err != nil {
		return 0, err
	}
	if int(res.Res) < len(buf) {
		return int(res.Res), io.EOF
	}
	return int(res.Res), nil
}

// WriteAt writes buf at off and waits; a short write is an error.
func (r *Ring) WriteAt(f File, buf []byte, off int64) (int, error) {
	res, err := r.do("write", func(c Completion) error { return r.Write(f, buf, uint64(off), c) })
	if err != nil {
		return 0, err
	}
	if int(res.Res) < len(buf) {
		return int(res.Res), io.ErrShortWrite
	}
	return int(res.Res), nil
}

// Sync fsyncs f and waits.
func (r *Ring) Sync(f File, datasync bool) error {
	_, err := r.do("fsync", func(c Completion) error { return r.Fsync(f, datasync, c) })
	return err
}
