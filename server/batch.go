package server

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
// of its chunk, on this connection only. Reads may wait for the device,
// and fsync and namespace operations for the metadata log, so they run on
// workers.
func inline(q *Request) bool {
	switch q.Op {
	case OpWrite:
		return q.Len <= inlineMax
	case OpNop, OpFstat:
		return true
	}
	return false
}

// inlineChunk is how many inline requests go to a worker as one piece
// of work, and postEvery how many replies the reader produces before it
// posts them.
const (
	inlineChunk = 16
	postEvery   = 16
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
	c.runInline()
	c.postAnswered()
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
	sl.next = nil
	switch {
	case st != StatusOK:
		c.badRequest(&sl.req, st)
		c.answered = append(c.answered, sl)
	case inline(&req):
		c.inline = append(c.inline, sl)
	default:
		c.dispatch(sl)
	}
}

// runInline runs the batch's inline requests. A batch of more than two
// chunks is spread: whole chunks go to workers, so that one client's
// queue depth uses more than one CPU as the same work in process would,
// and the reader runs the last chunk itself, posting its replies as it
// goes so that the client reaps and submits meanwhile.
func (c *conn) runInline() {
	q := c.inline
	for len(q) >= 2*inlineChunk {
		for i := range inlineChunk - 1 {
			q[i].next = q[i+1]
		}
		c.dispatch(q[0])
		q = q[inlineChunk:]
	}
	for _, sl := range q {
		c.exec(sl)
		c.answered = append(c.answered, sl)
		if len(c.answered) >= postEvery {
			c.postAnswered()
		}
	}
	clear(c.inline)
	c.inline = c.inline[:0]
}

// dispatch hands a request, or a chunk of them linked by next, to a
// worker.
func (c *conn) dispatch(sl *slot) {
	if c.busy.Add(1) > int64(c.workers) {
		// Every worker is busy: one more, so that requests run in
		// parallel up to the client's queue depth. Workers live as long
		// as the connection.
		c.workers++
		c.workerWG.Go(c.worker)
	}
	c.work <- sl
}

// worker runs what dispatch hands it and answers it.
func (c *conn) worker() {
	var done [inlineChunk]*slot
	for sl := range c.work {
		n := 0
		for ; sl != nil; sl = sl.next {
			c.exec(sl)
			done[n] = sl
			n++
		}
		c.busy.Add(-1)
		c.answer(done[:n])
	}
}

// answer hands answered requests to the writer (socket framing) or
// posts their replies (rings).
func (c *conn) answer(sls []*slot) {
	if c.ring != nil {
		c.post(sls)
	} else {
		c.replies.push(sls...)
	}
}

// postAnswered answers the requests the reader answered.
func (c *conn) postAnswered() {
	if len(c.answered) == 0 {
		return
	}
	c.answer(c.answered)
	clear(c.answered)
	c.answered = c.answered[:0]
}
