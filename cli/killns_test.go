package cli

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/zonefold/zonefold/server"
)

// The kill loop's namespace clients: through the Go client each creates
// files (write, fsync) or empty ones (open with create, no fsync),
// writes into them over their bytes or past their end (then fsync),
// truncates them to sizes inside a block (shorter or longer), renames
// them to fresh names, to names used before, or over another client's
// file, and unlinks them, one operation at a time, each acknowledged
// only when it returns (open's creation, truncate, rename and unlink are
// durable then, as docs/protocol.md says; written bytes once the fsync
// returns). A name removed or renamed away stays absent until an
// operation uses it again, and then holds that operation's file only. The clients share one set of names: each picks any
// acknowledged name no operation in flight touches (the names an
// operation touches are its own until it is acknowledged, so the model
// knows the order of operations on a name), and a rename may replace a
// file the other created or last truncated. After each kill every
// acknowledged file holds exactly its acknowledged bytes under its
// acknowledged name, and each operation in flight at the kill shows
// either its before or its after, whole: a rename leaves exactly one of
// the two names (over a file: the old name, or the new one with the
// renamed bytes), a truncate the old bytes or the cut ones, an empty
// creation nothing or an empty file; a write, never fsynced, leaves each
// byte old or written (a zero in a hole), at a size between.
//
// Three more kinds, each a few steps whose answers the model follows
// (nsOp.stage), checked against what the engine promises, not less:
//
//   - recreate: open of an acknowledged file with create and truncate
//     (sometimes with defer sync too, which defers a creation only),
//     then a write of new bytes and fsync. The truncate to 0 is durable
//     when open answers (engine.OpenFile truncates with File.Truncate,
//     durable when it returns): before that answer the file is its old
//     bytes or empty, after it never any old byte: each byte the new
//     one or a zero, at a size up to the new one's, until the fsync
//     makes the new bytes exact.
//   - mkdeferred: open of a fresh (or freed) name with create and defer
//     sync, a write, then the file's own fsync or an fsync of handle 0
//     (every file, as a directory's fsync). The creation is durable from
//     the next flush that acknowledges something (engine.ODeferSync):
//     after a kill before its sync the name may be absent, but not once
//     a flush that began after open's answer (any client's fsync or
//     durable namespace operation: nsFlushBegins) has been answered,
//     nor after its own sync (then it writes and syncs the same bytes
//     twice more, to widen that window). Any namespace record logged
//     meanwhile (a put's, GC's reset) lands it too, so a kill proves the
//     syncs' part only when it falls between.
//   - grow: perhaps a write past the end (not synced), then a truncate
//     to a larger size (with the grow flag, or plain), or a grow flag to
//     a size the file already has (which changes and logs nothing), then
//     an fsync (always after a write). An extending truncate is durable
//     when answered: from then on the size is exactly the new one, the
//     new range zeros; before its answer, the size is the old one, or
//     the written one, or the new one.

// nsClients is how many namespace clients run.
const nsClients = 2

// nsModel is what the namespace clients have had acknowledged.
type nsModel struct {
	files   map[string][]byte   // acknowledged names and bytes
	next    int                 // fresh names are never reused
	pending [nsClients]*nsOp    // in flight when the daemon died, by client
	busy    map[string]bool     // names an operation in flight touches
	acked   map[string]int      // operations acknowledged, by kind
	killed  map[string]int      // operations in flight at a kill, by kind
	hist    map[string][]string // what happened to each name, for failures
	free    []string            // names removed or renamed away, to use again
	// deferred holds the deferred creates answered and not yet known
	// durable: no flush that began after their answer has been.
	deferred map[*nsOp]bool
}

// nsNote adds an event to name's history (r.mu held, or the clients stopped).
func (r *killRun) nsNote(name, format string, args ...any) {
	r.ns.hist[name] = append(r.ns.hist[name], fmt.Sprintf("point %d: ", r.pointNo)+fmt.Sprintf(format, args...))
}

// nsOp is one namespace operation: kind, its file, the name a rename
// gives it (over is set when a file had that name), and the bytes a
// truncate leaves.
type nsOp struct {
	kind     string // create, mkempty, mkdeferred, write, truncate, rename, unlink, recreate, grow
	name, to string
	over     bool
	after    []byte
	off      int    // write, grow: where data goes
	data     []byte // write, grow, recreate, mkdeferred: the bytes written
	// stage is how many of a recreate's, mkdeferred's or grow's steps
	// were answered (nsStage): recreate 1 once open (its truncate) was;
	// mkdeferred 1 once open was, 2 once its sync was; grow 1 once its
	// write was (or had
	// none), 2 once its truncate was.
	stage   int
	flags   uint8 // recreate: open's flags
	size    int   // grow: the size asked for
	w       int   // grow: the size after its write (the size before, without one)
	growFl  bool  // grow: with TruncateGrow (else a plain truncate, which only grows here)
	sync    bool  // grow: fsync at the end
	sync0   bool  // mkdeferred, recreate: synced by an fsync of handle 0 (every file), not its own
	flushed bool  // mkdeferred: a flush that began after open's answer was answered
}

// flushes reports whether op's answer means that a device flush began
// after op did and ended: everything but a grow that changes nothing and
// has no fsync (it logs nothing).
func (op *nsOp) flushes() bool {
	return op.kind != "grow" || op.sync || op.size > op.w
}

// nsFlushBegins returns the deferred creates a flush beginning now covers
// (r.mu held): each is durable once the flush is answered (nsFlushed).
func (r *killRun) nsFlushBegins() []*nsOp {
	return slices.Collect(maps.Keys(r.ns.deferred))
}

// nsFlushed notes that a flush that began after ops were answered has
// been answered (r.mu held): their creations are durable.
func (r *killRun) nsFlushed(ops []*nsOp) {
	for _, op := range ops {
		op.flushed = true
		delete(r.ns.deferred, op)
	}
}

// nsStage notes that op's steps up to stage were answered.
func (r *killRun) nsStage(op *nsOp, stage int) {
	r.mu.Lock()
	op.stage = stage
	if op.kind == "mkdeferred" && stage == 1 {
		r.ns.deferred[op] = true
	}
	r.mu.Unlock()
}

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// nsWritten is before with data written at off (a zero-filled hole
// between).
func nsWritten(before []byte, off int, data []byte) []byte {
	after := make([]byte, max(len(before), off+len(data)))
	copy(after, before)
	copy(after[off:], data)
	return after
}

// nsPlanGrow draws a grow of a file holding before: perhaps a write past
// its end first, then a size larger than the file (inside a block or a
// whole number of blocks), or, with the grow flag, now and then one the
// file has already reached (which leaves it as it is).
func (r *killRun) nsPlanGrow(op *nsOp, before []byte, rng *rand.Rand) {
	mid := before
	op.stage = 1 // no write to answer
	if rng.IntN(2) == 0 {
		op.off = len(before) + rng.IntN(killBlock)
		op.data = randomBytes(rng, 1+rng.IntN(2*killBlock))
		mid = nsWritten(before, op.off, op.data)
		op.stage = 0
	}
	op.w = len(mid)
	op.growFl = rng.IntN(3) != 0
	if op.growFl && rng.IntN(4) == 0 {
		op.size = rng.IntN(op.w + 1)
	} else {
		op.size = op.w + 1 + rng.IntN(3*killBlock)
		if rng.IntN(3) == 0 {
			op.size = (op.size + killBlock - 1) / killBlock * killBlock
		}
	}
	op.after = make([]byte, max(op.w, op.size))
	copy(op.after, mid)
	// A write not synced must be before the grow is acknowledged
	// whole: the fsync after it.
	op.sync = op.data != nil || rng.IntN(2) == 0
}

func (op *nsOp) describeGrow(before int) string {
	var b strings.Builder
	if op.data != nil {
		fmt.Fprintf(&b, "wrote %d bytes at %d (%d -> %d), ", len(op.data), op.off, before, op.w)
	}
	how := "truncated"
	if op.growFl {
		how = "grew (grow flag)"
	}
	fmt.Fprintf(&b, "%s to %d (%d -> %d)", how, op.size, op.w, len(op.after))
	if op.sync {
		b.WriteString(", fsynced")
	}
	return b.String()
}

// nsClient runs namespace operations as client id until the daemon dies
// or ctx ends.
func (r *killRun) nsClient(ctx context.Context, id int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 5))
	stop := ctx
	ctx = context.Background() // calls end when the daemon dies (see rawWriter)
	c, err := server.Dial(ctx, r.socket, 4<<20)
	if err != nil {
		return
	}
	defer c.Close()
	m := &r.ns
	for stop.Err() == nil {
		r.mu.Lock()
		names := make([]string, 0, len(m.files))
		for n := range m.files {
			if !m.busy[n] {
				names = append(names, n)
			}
		}
		slices.Sort(names)
		op := &nsOp{kind: "create"}
		if len(names) >= 3 && rng.IntN(4) != 0 {
			op.kind = []string{"truncate", "rename", "unlink", "write", "recreate", "grow"}[rng.IntN(6)]
			i := rng.IntN(len(names))
			op.name = names[i]
			if op.kind == "rename" && rng.IntN(3) == 0 {
				// Over another file, most likely one the other
				// client made or changed.
				op.to, op.over = names[(i+1+rng.IntN(len(names)-1))%len(names)], true
			}
		}
		if op.kind == "create" {
			switch rng.IntN(4) {
			case 0:
				op.kind = "mkempty"
			case 1:
				op.kind = "mkdeferred"
				op.data = randomBytes(rng, rng.IntN(6*killBlock))
				op.after = op.data
				op.sync0 = rng.IntN(2) == 0
			}
		}
		if op.to == "" && (op.kind == "create" || op.kind == "mkempty" || op.kind == "mkdeferred" || op.kind == "rename") {
			if len(m.free) > 0 && rng.IntN(2) == 0 {
				// A name removed or renamed away before: it must
				// come back with this operation's file only.
				j := rng.IntN(len(m.free))
				op.to = m.free[j]
				m.free = slices.Delete(m.free, j, j+1)
				delete(r.gone, op.to)
			} else {
				m.next++
				op.to = fmt.Sprintf("ns.%d.%d", r.seed, m.next)
			}
		}
		before := m.files[op.name]
		for _, n := range []string{op.name, op.to} {
			if n != "" {
				m.busy[n] = true
			}
		}
		if op.kind == "truncate" {
			// A size inside a block: the tail's rewrite is part of it.
			size := 1 + rng.IntN(len(before)+3*killBlock)
			if size%killBlock == 0 {
				size++
			}
			op.after = make([]byte, size)
			copy(op.after, before)
		}
		if op.kind == "write" {
			// Over the file's bytes, past its end, or after a hole.
			op.off = rng.IntN(len(before) + killBlock + 1)
			op.data = randomBytes(rng, 1+rng.IntN(4*killBlock))
			op.after = nsWritten(before, op.off, op.data)
		}
		if op.kind == "recreate" {
			op.flags = server.OpenCreate | server.OpenTrunc
			if rng.IntN(3) == 0 {
				// Defer sync defers a creation: this open creates
				// nothing, and its truncate is durable all the same.
				op.flags |= server.OpenDeferSync
			}
			op.data = randomBytes(rng, rng.IntN(6*killBlock))
			op.after = op.data
			op.sync0 = rng.IntN(4) == 0
		}
		if op.kind == "grow" {
			r.nsPlanGrow(op, before, rng)
		}
		var cover []*nsOp
		if op.flushes() {
			cover = r.nsFlushBegins()
		}
		m.pending[id] = op
		r.mu.Unlock()
		if err := r.nsDo(ctx, c, op, rng); err != nil {
			return // the daemon died: op stays pending
		}
		r.mu.Lock()
		r.nsFlushed(cover)
		delete(m.busy, op.name)
		delete(m.busy, op.to)
		switch op.kind {
		case "create", "mkempty", "mkdeferred":
			m.files[op.to] = op.after
			delete(m.deferred, op)
		case "truncate", "write", "recreate", "grow":
			m.files[op.name] = op.after
		case "rename":
			m.files[op.to] = before
			r.nsGone(op.name)
		case "unlink":
			r.nsGone(op.name)
		}
		m.pending[id] = nil
		kind := op.kind
		if op.over {
			kind = "rename-over"
		}
		m.acked[kind]++
		switch op.kind {
		case "create":
			r.nsNote(op.to, "client %d: created %d bytes", id, len(op.after))
		case "mkempty":
			r.nsNote(op.to, "client %d: created empty", id)
		case "mkdeferred":
			r.nsNote(op.to, "client %d: created with defer sync, wrote %d bytes, fsynced (handle 0 %v; flushed before by another %v)", id, len(op.data), op.sync0, op.flushed)
		case "recreate":
			r.nsNote(op.name, "client %d: opened with create|truncate (flags %#x) at %d bytes, wrote %d bytes, fsynced (handle 0 %v)", id, op.flags, len(before), len(op.data), op.sync0)
		case "grow":
			r.nsNote(op.name, "client %d: %s", id, op.describeGrow(len(before)))
		case "write":
			r.nsNote(op.name, "client %d: wrote %d bytes at %d (%d -> %d), fsynced", id, len(op.data), op.off, len(before), len(op.after))
		case "truncate":
			r.nsNote(op.name, "client %d: truncated %d -> %d", id, len(before), len(op.after))
		case "rename":
			r.nsRenamed(op, fmt.Sprintf("client %d: renamed from %s", id, op.name))
		case "unlink":
			r.nsNote(op.name, "client %d: unlinked", id)
		}
		r.mu.Unlock()
	}
}

// nsGone records that name was removed or renamed away (r.mu held, or
// the clients stopped): it must stay absent until an operation uses it
// again.
func (r *killRun) nsGone(name string) {
	delete(r.ns.files, name)
	r.gone[name] = true
	r.ns.free = append(r.ns.free, name)
}

// nsRenamed moves op's name's history to its new name (r.mu held, or the
// clients stopped); a file the rename replaced leaves its own behind.
func (r *killRun) nsRenamed(op *nsOp, note string) {
	hist := slices.Clone(r.ns.hist[op.name])
	if op.over {
		hist = append(hist, "(over "+op.to+", whose history was:", "\t"+strings.Join(r.ns.hist[op.to], "\n\t\t")+")")
	}
	r.ns.hist[op.to] = hist
	r.nsNote(op.to, "%s", note)
}

// nsDo performs op; a create's bytes are chosen here (op.after).
func (r *killRun) nsDo(ctx context.Context, c *server.Client, op *nsOp, rng *rand.Rand) error {
	switch op.kind {
	case "create":
		data := make([]byte, 1+rng.IntN(10*killBlock))
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		h, _, err := c.Open(ctx, op.to, server.OpenCreate|server.OpenTrunc)
		if err != nil {
			return err
		}
		defer c.CloseFile(ctx, h)
		if _, err := c.WriteAt(ctx, h, data, 0); err != nil {
			return err
		}
		if err := c.Fsync(ctx, h); err != nil {
			return err
		}
		r.mu.Lock()
		op.after = data
		r.mu.Unlock()
		return nil
	case "mkempty":
		// Creation is durable when open answers, with no fsync.
		h, size, err := c.Open(ctx, op.to, server.OpenCreate)
		if err != nil {
			return err
		}
		if size != 0 {
			r.t.Errorf("point %d: ns %s, removed or renamed away (acknowledged), opened with create at %d bytes", r.pointNo, op.to, size)
		}
		r.mu.Lock()
		op.after = []byte{}
		r.mu.Unlock()
		return c.CloseFile(ctx, h)
	case "mkdeferred", "recreate":
		name, flags, why := op.to, uint8(server.OpenCreate|server.OpenDeferSync), "removed or renamed away (acknowledged), created"
		if op.kind == "recreate" {
			name, flags, why = op.name, op.flags, "truncated by open"
		}
		h, size, err := c.Open(ctx, name, flags)
		if err != nil {
			return err
		}
		defer c.CloseFile(ctx, h)
		if size != 0 {
			r.t.Errorf("point %d: ns %s, %s (flags %#x), opened at %d bytes", r.pointNo, name, why, flags, size)
		}
		r.nsStage(op, 1)
		if len(op.data) > 0 {
			if _, err := c.WriteAt(ctx, h, op.data, 0); err != nil {
				return err
			}
		}
		syncIt := func() error {
			if op.sync0 {
				return c.Fsync(ctx, 0) // every file, as a directory's fsync
			}
			return c.Fsync(ctx, h)
		}
		if err := syncIt(); err != nil || op.kind == "recreate" {
			return err
		}
		// Durable now: its bytes again (the same), synced again,
		// twice.
		r.nsStage(op, 2)
		for range 2 {
			if len(op.data) > 0 {
				if _, err := c.WriteAt(ctx, h, op.data, 0); err != nil {
					return err
				}
			}
			if err := syncIt(); err != nil {
				return err
			}
		}
		return nil
	case "grow":
		h, _, err := c.Open(ctx, op.name, 0)
		if err != nil {
			return err
		}
		defer c.CloseFile(ctx, h)
		if op.data != nil {
			if _, err := c.WriteAt(ctx, h, op.data, int64(op.off)); err != nil {
				return err
			}
			r.nsStage(op, 1)
		}
		if op.growFl {
			err = c.Grow(ctx, h, int64(op.size))
		} else {
			err = c.Truncate(ctx, h, int64(op.size))
		}
		if err != nil {
			return err
		}
		r.nsStage(op, 2)
		if op.sync {
			return c.Fsync(ctx, h)
		}
		return nil
	case "write", "truncate":
		h, _, err := c.Open(ctx, op.name, 0)
		if err != nil {
			return err
		}
		defer c.CloseFile(ctx, h)
		if op.kind == "truncate" {
			return c.Truncate(ctx, h, int64(len(op.after)))
		}
		if _, err := c.WriteAt(ctx, h, op.data, int64(op.off)); err != nil {
			return err
		}
		return c.Fsync(ctx, h)
	case "rename":
		return c.Rename(ctx, op.name, op.to)
	default:
		return c.Remove(ctx, op.name)
	}
}

// checkNS checks the namespace client's files after a restart (have: the
// names listed, with sizes), settles the operation in flight as the
// device shows it, and adds the names it keeps to known.
func (r *killRun) checkNS(ctx context.Context, c *server.Client, have map[string]int64, known map[string]bool, fail func(string, ...any)) {
	m := &r.ns
	read := func(name string) []byte {
		got, err := readWhole(ctx, c, name)
		if err != nil {
			fail("ns %s: read: %v", name, err)
		}
		return got
	}
	// The operations in flight touch distinct names: each is settled
	// on its own.
	for id, op := range m.pending {
		m.pending[id] = nil
		if op == nil {
			continue
		}
		r.ns.killed[op.kind]++
		r.settleNS(ctx, c, op, have, read, known, fail)
	}
	m.busy = map[string]bool{}
	clear(m.deferred)
	for name, want := range m.files {
		known[name] = true
		if _, ok := have[name]; !ok {
			fail("ns %s (%d bytes, acknowledged) is gone", name, len(want))
			delete(m.files, name)
			continue
		}
		if got := read(name); !bytes.Equal(got, want) {
			d := firstDiffAt(got, want)
			fail("ns %s: %d bytes, want the acknowledged %d (first difference at %d: %s, want %s); its history:\n\t%s",
				name, len(got), len(want), d, describeRun(got[d:]), describeRun(want[min(d, len(want)):]), strings.Join(r.ns.hist[name], "\n\t"))
		}
	}
}

// nsMixed returns the first byte of got, what writes not synced left of
// a file that held before and would hold after, that is neither the old
// one nor the written one (nor a zero past the old end: a hole), or -1.
// Bytes past after's end are the caller's to judge.
func nsMixed(got, before, after []byte) int {
	for i := range min(len(got), len(after)) {
		if got[i] == after[i] || i < len(before) && got[i] == before[i] || i >= len(before) && got[i] == 0 {
			continue
		}
		return i
	}
	return -1
}

func firstDiffAt(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// describeRun says what a run of bytes looks like: its length, how many
// are zero, and its first few.
func describeRun(b []byte) string {
	zeros := 0
	for _, c := range b {
		if c == 0 {
			zeros++
		}
	}
	return fmt.Sprintf("%d bytes, %d zero, % x", len(b), zeros, b[:min(8, len(b))])
}

// settleNS settles one operation in flight at the kill as the device
// shows it (have: the names listed).
func (r *killRun) settleNS(ctx context.Context, c *server.Client, op *nsOp, have map[string]int64, read func(string) []byte, known map[string]bool, fail func(string, ...any)) {
	m := &r.ns
	before := m.files[op.name]
	_, hasName := have[op.name]
	_, hasTo := have[op.to]
	// kept reads op's name, acknowledged before op began, which must
	// still be there; drop removes what op's creation left.
	kept := func(what string) ([]byte, bool) {
		if !hasName {
			fail("ns %s: gone after %s in flight (the name was acknowledged)", op.name, what)
			delete(m.files, op.name)
			return nil, false
		}
		return read(op.name), true
	}
	drop := func() {
		if hasTo {
			if err := c.Remove(ctx, op.to); err != nil {
				fail("ns rm %s: %v", op.to, err)
			}
			known[op.to] = true // removed here already
		}
		r.nsGone(op.to)
	}
	switch op.kind {
	case "create", "mkempty":
		// Not acknowledged: whatever is there goes (an empty
		// creation's name, if there, holds nothing).
		if op.kind == "mkempty" && hasTo && have[op.to] != 0 {
			fail("ns %s: an empty creation in flight left %d bytes", op.to, have[op.to])
		}
		drop()
	case "write":
		// Not fsynced: each byte the old one or the written one (or
		// a zero of the hole past the old end); the size between.
		got, ok := kept("a write")
		if !ok {
			break
		}
		if len(got) < len(before) || len(got) > len(op.after) {
			fail("ns %s: a write of %d bytes at %d in flight (%d -> %d bytes) left %d bytes", op.name, len(op.data), op.off, len(before), len(op.after), len(got))
		}
		if i := nsMixed(got, before, op.after); i >= 0 {
			fail("ns %s: a write of %d bytes at %d in flight left byte %d = %#x, neither the old one (%s) nor the written %#x; its history:\n\t%s",
				op.name, len(op.data), op.off, i, got[i], describeRun(before[min(i, len(before)):]), op.after[i], strings.Join(r.ns.hist[op.name], "\n\t"))
		}
		m.files[op.name] = got
		r.nsNote(op.name, "write of %d bytes at %d in flight at the kill: found %d bytes", len(op.data), op.off, len(got))
	case "mkdeferred":
		// Before open's answer: nothing, or an empty file. After
		// it, the creation is durable once a flush that began later
		// was answered; the file holds each byte written or a zero.
		if op.stage >= 1 && (op.flushed || op.stage == 2) && !hasTo {
			fail("ns %s: created with defer sync (answered), then a flush began and was answered (its own sync %v); gone after the kill (%d bytes written); its history:\n\t%s",
				op.to, op.stage == 2, len(op.data), strings.Join(r.ns.hist[op.to], "\n\t"))
		}
		if hasTo {
			got := read(op.to)
			if op.stage == 2 && !bytes.Equal(got, op.after) {
				fail("ns %s: created with defer sync, %d bytes written, synced (answered): %d bytes (first difference at %d)", op.to, len(op.after), len(got), firstDiffAt(got, op.after))
			} else if op.stage == 0 && len(got) != 0 {
				fail("ns %s: a creation with defer sync in flight left %d bytes", op.to, len(got))
			} else if i := nsMixed(got, nil, op.after); len(got) > len(op.after) || i >= 0 {
				fail("ns %s: created with defer sync, %d bytes written, not synced: %d bytes (first neither written nor zero: %d)", op.to, len(op.after), len(got), i)
			}
		}
		drop()
	case "recreate":
		// Before open's answer: the old bytes, or none. After it
		// (its truncate durable): never an old byte; each the new one
		// or a zero, up to the new size.
		got, ok := kept("an open with create|truncate")
		if !ok {
			break
		}
		switch {
		case op.stage == 0 && (len(got) == 0 || bytes.Equal(got, before)):
		case op.stage == 0:
			fail("ns %s: an open with create|truncate in flight left %d bytes, neither the %d before nor none", op.name, len(got), len(before))
		case len(got) > len(op.after) || nsMixed(got, nil, op.after) >= 0:
			d := max(nsMixed(got, nil, op.after), 0)
			fail("ns %s: opened with create|truncate (answered: the truncate durable) from %d bytes, writing %d not synced: %d bytes (equal to the old %v), first neither written nor zero at %d: %s; its history:\n\t%s",
				op.name, len(before), len(op.after), len(got), bytes.Equal(got, before), d, describeRun(got[min(d, len(got)):]), strings.Join(r.ns.hist[op.name], "\n\t"))
		}
		m.files[op.name] = got
		r.nsNote(op.name, "open with create|truncate (flags %#x) from %d bytes, then %d bytes, in flight at the kill (step %d answered): found %d bytes", op.flags, len(before), len(op.after), op.stage, len(got))
	case "grow":
		got, ok := kept("a grow")
		if !ok {
			break
		}
		// Every byte old, written or zero (the new range reads zeros).
		ok = nsMixed(got, before, op.after) < 0 && len(got) <= len(op.after)
		grows := op.size > op.w
		switch {
		case op.stage == 2 && grows:
			// The extending truncate was answered: durable.
			ok = ok && len(got) == op.size
		case op.stage >= 1 && grows:
			// In flight: the size before it, or its own.
			ok = ok && (len(got) >= len(before) && len(got) <= op.w || len(got) == op.size)
		default:
			// Only the write (not synced) changed the file.
			ok = ok && len(got) >= len(before) && len(got) <= op.w
		}
		if !ok {
			fail("ns %s: %s in flight at the kill (step %d answered) left %d bytes (first neither old, written nor zero: %d); its history:\n\t%s",
				op.name, op.describeGrow(len(before)), op.stage, len(got), nsMixed(got, before, op.after), strings.Join(r.ns.hist[op.name], "\n\t"))
		}
		m.files[op.name] = got
		r.nsNote(op.name, "%s in flight at the kill (step %d answered): found %d bytes", op.describeGrow(len(before)), op.stage, len(got))
	case "truncate":
		if hasName {
			if got := read(op.name); bytes.Equal(got, op.after) {
				m.files[op.name] = op.after
				r.nsNote(op.name, "truncate %d -> %d in flight at the kill: found done", len(before), len(op.after))
			} else if bytes.Equal(got, before) {
				r.nsNote(op.name, "truncate %d -> %d in flight at the kill: found undone", len(before), len(op.after))
			} else {
				fail("ns %s: a truncate to %d in flight left %d bytes, neither the %d before nor the cut ones", op.name, len(op.after), len(got), len(before))
			}
		}
	case "rename":
		// Before: the old name (and, over a file, the new one, which
		// the check of acknowledged files reads); after: the new name
		// alone, with the renamed bytes.
		switch {
		case hasName && hasTo == op.over:
			// Not done.
			if !op.over {
				r.nsGone(op.to)
			}
		case hasName || !hasTo:
			fail("ns rename %s -> %s (over a file %v) in flight: old name there %v, new name there %v", op.name, op.to, op.over, hasName, hasTo)
		default:
			r.nsRenamed(op, fmt.Sprintf("renamed from %s in flight at the kill: found done", op.name))
			m.files[op.to] = before
			r.nsGone(op.name)
		}
	case "unlink":
		if !hasName {
			r.nsGone(op.name)
		}
	}
}
