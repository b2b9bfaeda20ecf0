package server

import (
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"
)

// TestRingWantNoLostWake drives the ring as the fio engine does:
// keep requests in flight (nops answered inline, stats answered by
// workers), then sleep for want replies (1..inflight) with
// CQWaiting|CQWant, checking cq_tail after the flag's fetch-or. A lost
// wakeup leaves the client asleep with WAITING set and nothing new for
// a whole 5 s slice.
func TestRingWantNoLostWake(t *testing.T) {
	d := newDaemon(t)
	w := newRawRing(t, d.socket)
	copy(w.c.mapped, "missing")
	rng := rand.New(rand.NewPCG(1, 2))
	inflight := uint32(0)
	const flags = CQWaiting | CQWant
	rounds := 20000
	if testing.Short() {
		rounds = 2000
	}
	for round := 0; round < rounds; round++ {
		for k := rng.IntN(4) + 1; k > 0 && inflight < w.r.entries/2; k-- {
			q := Request{Tag: uint64(round), Op: OpNop}
			if rng.IntN(2) == 0 {
				q = Request{Tag: uint64(round), Op: OpStat, Len: 7}
			}
			w.publish(t, q)
			inflight++
		}
		want := uint32(rng.IntN(int(inflight))) + 1
		for {
			tail := atomic.LoadUint32(w.r.cqTail)
			if n := tail - w.r.head; n > 0 {
				inflight -= n
				w.r.head = tail
				atomic.StoreUint32(w.r.cqHead, tail)
				break
			}
			atomic.StoreUint32(w.want, w.r.head+want)
			setFlag(w.r.cqFlags, flags)
			if atomic.LoadUint32(w.r.cqTail)-w.r.head >= want {
				claimFlag(w.r.cqFlags, flags)
				continue
			}
			start := time.Now()
			futexWait(w.r.cqFlags, flags, 5*time.Second)
			if atomic.LoadUint32(w.r.cqFlags)&CQWaiting != 0 && atomic.LoadUint32(w.r.cqTail) == w.r.head && time.Since(start) >= 5*time.Second {
				t.Fatalf("round %d: lost wakeup: asleep 5 s for %d of %d in flight, cq_tail %d head %d", round, want, inflight, atomic.LoadUint32(w.r.cqTail), w.r.head)
			}
			claimFlag(w.r.cqFlags, flags)
		}
	}
}
