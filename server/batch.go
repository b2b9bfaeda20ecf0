package server

import "time"

// How a connection runs a batch of requests, whichever way they came
// (socket message or submission ring).

// inlineMax is the largest write the reader copies into the cache
// itself; larger ones go to workers, which copy several at once.
const inlineMax = 64 << 10

// inline says which requests the reader runs itself (or in chunks, see
// runInline) rather than handing them to a worker one by one: those that
// only touch memory in the common case. A small write goes to the cache;
// handing each to a worker would cost two goroutine switches, more than
// the copy (measured: 2.5x the IOPS at 4k QD128). The price: a write that
// waits (dirty throttling, a block under writeback) holds up the requests
// of its chunk, on this connection only; and while the reader waits it
// reads no more of the socket, so it would not see the client go. A
// small write that starts while writes are throttled therefore goes to a
// worker, whose wait the session's end cancels. Reads may wait for the device,
// and fsync and namespace operations for the metadata log, so they run on
// workers; but a read of at most inlineMax bytes that the cache holds
// whole, which it can serve without waiting for anything, the reader
// serves as it takes it (readCached).
func inline(q *Request) bool {
	switch q.Op {
	case OpWrite:
		return q.Len <= inlineMax
	case OpNop, OpFstat:
		return true
	}
	return false
}

// inlineChunk is the least number of inline requests worth handing to
// a worker as one piece of work, and postEvery how many replies a piece
// produces before it posts them.
const (
	inlineChunk = 16
	postEvery   = 16
)

// postKind says whether a post may wake a client that sleeps.
type postKind uint8

const (
	// postAlone: replies of requests run on their own (reads, fsyncs,
	// large writes, malformed requests); the client is woken.
	postAlone postKind = iota
	// postMid: some replies of a piece of inline work that goes on; a
	// client that is awake sees them, one that sleeps is woken only if
	// they are all its wait needs (CQWant, wantMet).
	postMid
	// postEnd: the last replies of a piece of inline work; the client is
	// woken if no other piece is still running. A client that sleeps is
	// woken once per batch, as with socket framing, not once per piece.
	postEnd
)

// freeSlot returns a free slot for the next request. If there is none
// (with socket framing: the client has MaxInflight requests unanswered),
// it first runs and answers what this batch has taken, then waits for
// one. It returns nil and why if the session ends meanwhile.
func (c *conn) freeSlot() (*slot, string) {
	select {
	case sl := <-c.free:
		return sl, ""
	default:
	}
	c.unplugReads()
	c.runInline()
	c.postAnswered(postAlone)
	select {
	case sl := <-c.free:
		return sl, ""
	case <-c.stopCh:
		return nil, "daemon shutting down"
	case <-c.ctx.Done():
		return nil, "sending replies failed"
	}
}

// take parses one request into sl: a malformed one is answered at once,
// an inline one waits in c.inline for runInline, the rest go to a worker.
func (c *conn) take(sl *slot, raw []byte) {
	c.inflight.Add(1)
	req, st := ParseRequest(raw, uint64(len(c.region)))
	sl.req = req
	sl.rep = Reply{Tag: req.Tag, Status: st}
	sl.next, sl.piece = nil, false
	switch {
	case st != StatusOK:
		c.badRequest(&sl.req, st)
		c.answered = append(c.answered, sl)
	case inline(&req) && !(req.Op == OpWrite && c.s.e.WritesThrottled()):
		c.inline = append(c.inline, sl)
	case req.Op == OpRead && req.Len <= inlineReadMax && c.readCached(sl):
		c.answered = append(c.answered, sl)
	case req.Op == OpRead && c.startRead(sl):
		// Answered when its device reads complete (slot.ReadDone).
	default:
		c.dispatch(sl)
	}
}

// inlineReadMax is the largest read the reader serves itself when the
// cache holds all of it (readCached). 128 KiB hits in the reader made
// seq 128k qd4 cold reads (readahead's hits) 0.87-0.92x in two of three
// series: the reader copied a batch's hits one after another where
// workers copy them on every CPU.
const inlineReadMax = inlineMax

// readCached runs a read in the reader if the cache holds every byte of
// it and nothing it needs is locked (engine.File.ReadCached), and
// reports whether it did; if not, the read goes to a worker as before.
// A hit handed to a worker costs the worker's wake and the reply's, each
// a wait for a CPU (the reader's hand-off alone waited 29 µs runnable
// on average in a trace of cold rand 64k qd8), for a copy of a few
// microseconds: served here, hot 4k random reads at queue depth 32
// (coldread-cases.py warm4k-qd32) ran 1.48-1.77x the MiB/s at about half
// the daemon's CPU. It never waits, so request intake never does: the
// handle's lock is only tried too (a close waiting for it would
// otherwise hold the reader behind the requests using the handle), and
// with an exec hook set (tests that hold requests in flight) every read
// goes to a worker.
func (c *conn) readCached(sl *slot) bool {
	q, r := &sl.req, &sl.rep
	h := c.tryReadHandle(q)
	if h == nil {
		return false
	}
	ok := h.f != nil && h.f.ReadCached(c.region[q.Addr:q.Addr+uint64(q.Len)], int64(q.Off))
	h.mu.RUnlock()
	if ok {
		stats := &c.s.stats
		stats.requests[OpRead].Add(1)
		stats.readsCached.Add(1)
		stats.bytesRead.Add(int64(q.Len))
		r.Val = uint64(q.Len)
		r.Status = StatusOK
	}
	return ok
}

// runInline runs the batch's inline requests, and answers them with what
// the batch answered already. A batch of at least two chunks is split
// into as many pieces as there are CPUs to run them less the one the
// client needs (GOMAXPROCS-1, at least one), so that one client's queue
// depth uses more than one CPU where there are more than two, as the
// same work in process would: workers run the other pieces, the reader
// the first. The client is left a CPU because it must run to reap the
// replies and publish more: on 2 CPUs, splitting a batch of 32 in two
// woke a worker per batch that then competed with fio and the reader
// for the two CPUs (fio 4k QD128 on a null device took 27-29 ms split,
// 19-20 ms unsplit). A piece posts its replies as it goes, so that a
// client that is awake reaps and submits while the rest runs.
func (c *conn) runInline() {
	q := c.inline
	if len(q) == 0 {
		return
	}
	pieces := 1
	if len(q) >= 2*inlineChunk {
		pieces = min(max(1, c.s.procs-1), len(q)/inlineChunk)
	}
	size := (len(q) + pieces - 1) / pieces
	if c.ring != nil {
		c.pieces.Add(int64(pieces))
	}
	for rest := q[size:]; len(rest) > 0; {
		part := rest[:min(size, len(rest))]
		for i := range len(part) - 1 {
			part[i].next = part[i+1]
		}
		part[0].piece = true
		c.dispatch(part[0])
		rest = rest[len(part):]
	}
	mine := q[:size]
	for i, sl := range mine {
		if sl.req.Op == OpWrite && c.s.e.WritesThrottled() {
			// The rest would wait in the reader (see inline): a
			// worker runs it as one more piece.
			rest := mine[i:]
			for j := range len(rest) - 1 {
				rest[j].next = rest[j+1]
			}
			rest[0].piece = true
			if c.ring != nil {
				c.pieces.Add(1)
			}
			c.dispatch(rest[0])
			break
		}
		c.exec(sl)
		c.answered = append(c.answered, sl)
		if len(c.answered) >= postEvery {
			c.postAnswered(postMid)
		}
	}
	c.postAnswered(postEnd)
	clear(c.inline)
	c.inline = c.inline[:0]
}

// dispatch hands a request, or a piece of inline work linked by next, to
// a worker.
func (c *conn) dispatch(sl *slot) {
	if c.busy.Add(1) > c.workers.Load() {
		// Every worker is busy: one more, so that requests run in
		// parallel up to the client's queue depth. Workers idle for
		// workerIdle retire (retire).
		c.workers.Add(1)
		c.workerWG.Go(c.worker)
	}
	c.work <- sl
}

// retire ends an idle worker's life if the requests handed to workers
// and not finished leave it nothing to do, and says whether it did.
// Either dispatch sees the count of workers fall (and starts one) or
// this sees its busy count rise (and the worker stays): a request
// handed over always has a worker.
func (c *conn) retire() bool {
	w := c.workers.Add(-1)
	if c.busy.Load() > w {
		c.workers.Add(1)
		return false
	}
	return true
}

// next is the worker's next piece of work, or nil once the connection
// ends or the worker retires, idle for workerIdle (a burst of requests
// at once left as many workers as requests, for as long as the
// connection lived: TestH33bIdleWorkersRetire). idle is the worker's
// timer; work already queued is taken without it.
func (c *conn) next(idle *time.Timer) *slot {
	select {
	case sl := <-c.work:
		return sl
	default:
	}
	for {
		idle.Reset(workerIdle)
		select {
		case sl := <-c.work:
			return sl
		case <-idle.C:
			if c.retire() {
				return nil
			}
		}
	}
}

// workerIdle is how long a worker waits for work before it retires.
var workerIdle = 10 * time.Second

// worker runs what dispatch hands it and answers it.
func (c *conn) worker() {
	var done [postEvery]*slot
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		sl := c.next(idle)
		if sl == nil {
			return
		}
		if !sl.piece {
			c.exec(sl)
			c.busy.Add(-1)
			done[0] = sl
			c.answer(done[:1], postAlone)
			continue
		}
		n := 0
		for ; sl != nil; sl = sl.next {
			c.exec(sl)
			if n == len(done) {
				c.answer(done[:n], postMid)
				n = 0
			}
			done[n] = sl
			n++
		}
		c.busy.Add(-1)
		c.answer(done[:n], postEnd)
	}
}

// answer hands answered requests to the writer (socket framing) or
// posts their replies (rings).
func (c *conn) answer(sls []*slot, kind postKind) {
	if c.ring != nil {
		c.post(sls, kind)
	} else {
		c.replies.push(sls...)
	}
}

// postAnswered answers the requests the reader answered. A postEnd is
// made even with nothing to post: it ends the reader's piece.
func (c *conn) postAnswered(kind postKind) {
	if len(c.answered) == 0 && kind != postEnd {
		return
	}
	c.answer(c.answered, kind)
	clear(c.answered)
	c.answered = c.answered[:0]
}

// startRead begins a read the cache does not hold in the reader, if the
// engine can begin it without waiting (engine.File.StartRead: a whole
// missing folio of the cache's), and reports whether it did; if not, the
// read goes to a worker as before. The read's device reads are submitted
// under the reader's plug, which it releases once it has taken the
// batch (unplugReads), so that the misses of a batch enter the kernel
// together; each read is finished as its completions arrive
// (slot.ReadDone), not by a worker. A cold miss handed to a worker cost
// two goroutine wakes on top of the device read (the hand-off and the
// completion's), and a batch's workers finished their reads one after
// another on one CPU: in a trace of cold rand 64k qd8 the device was
// idle in 61-78% of the samples. Like readCached, it never waits: the
// handle's lock is only tried, and with an exec hook set every read goes
// to a worker.
func (c *conn) startRead(sl *slot) bool {
	q := &sl.req
	h := c.tryReadHandle(q)
	if h == nil {
		return false
	}
	if h.f == nil {
		h.mu.RUnlock()
		return false
	}
	if !c.readsPlugged {
		c.s.e.PlugReads()
		c.readsPlugged = true
	}
	sl.h = h
	if !h.f.StartRead(c.region[q.Addr:q.Addr+uint64(q.Len)], int64(q.Off), sl) {
		sl.h = nil
		h.mu.RUnlock()
		return false
	}
	return true
}

// tryReadHandle is the handle of q, a read the reader would serve or
// begin itself, read-locked if its lock is free at once; nil if not, or
// with an exec hook set (tests that hold requests in flight: every read
// goes to a worker).
func (c *conn) tryReadHandle(q *Request) *handle {
	if execHook.Load() != nil || q.Handle == 0 || q.Handle > MaxHandles {
		return nil
	}
	i := q.Handle - 1
	chunk := c.handles.chunks[i/handleChunk].Load()
	if chunk == nil {
		return nil
	}
	h := &chunk[i%handleChunk]
	if !h.mu.TryRLock() {
		return nil
	}
	return h
}

// unplugReads ends the reader's plug of the batch's reads (startRead),
// if it holds one: their device reads enter the kernel. The reader calls
// it before anything that may wait.
func (c *conn) unplugReads() {
	if c.readsPlugged {
		c.readsPlugged = false
		c.s.e.UnplugReads()
	}
}

// ReadDone implements engine.ReadDone for a read startRead began: it
// answers the read, or hands it to a goroutine of its own to read again
// the way that may wait (the file changed while it was read, rarely).
// It runs on the engine's ring reaper (or its cold-read finisher) and
// does not block.
func (sl *slot) ReadDone(n int, err error, again bool) {
	c, h := sl.c, sl.h
	sl.h = nil
	h.mu.RUnlock()
	if again {
		go c.readAgain(sl)
		return
	}
	stats := &c.s.stats
	stats.requests[OpRead].Add(1)
	stats.bytesRead.Add(int64(n))
	sl.rep.Val = uint64(n)
	sl.rep.Status = c.status(err)
	c.answer(sl.one[:], postAlone)
}

// readAgain runs a read startRead began that must be read again, and
// answers it.
func (c *conn) readAgain(sl *slot) {
	c.exec(sl)
	c.answer(sl.one[:], postAlone)
}
