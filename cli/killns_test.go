package cli

import (
	"bytes"
	"context"
	"fmt"
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
}

// nsNote adds an event to name's history (r.mu held, or the clients stopped).
func (r *killRun) nsNote(name, format string, args ...any) {
	r.ns.hist[name] = append(r.ns.hist[name], fmt.Sprintf("point %d: ", r.pointNo)+fmt.Sprintf(format, args...))
}

// nsOp is one namespace operation: kind, its file, the name a rename
// gives it (over is set when a file had that name), and the bytes a
// truncate leaves.
type nsOp struct {
	kind     string // create, mkempty, write, truncate, rename, unlink
	name, to string
	over     bool
	after    []byte
	off      int    // write: where data goes
	data     []byte // write: the bytes written
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
			op.kind = []string{"truncate", "rename", "unlink", "write"}[rng.IntN(4)]
			i := rng.IntN(len(names))
			op.name = names[i]
			if op.kind == "rename" && rng.IntN(3) == 0 {
				// Over another file, most likely one the other
				// client made or changed.
				op.to, op.over = names[(i+1+rng.IntN(len(names)-1))%len(names)], true
			}
		}
		if op.kind == "create" && rng.IntN(3) == 0 {
			op.kind = "mkempty"
		}
		if op.to == "" && (op.kind == "create" || op.kind == "mkempty" || op.kind == "rename") {
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
			op.data = make([]byte, 1+rng.IntN(4*killBlock))
			for i := range op.data {
				op.data[i] = byte(rng.Uint32())
			}
			op.after = make([]byte, max(len(before), op.off+len(op.data)))
			copy(op.after, before)
			copy(op.after[op.off:], op.data)
		}
		m.pending[id] = op
		r.mu.Unlock()
		if err := r.nsDo(ctx, c, op, rng); err != nil {
			return // the daemon died: op stays pending
		}
		r.mu.Lock()
		delete(m.busy, op.name)
		delete(m.busy, op.to)
		switch op.kind {
		case "create", "mkempty":
			m.files[op.to] = op.after
		case "truncate", "write":
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
	switch op.kind {
	case "create", "mkempty":
		// Not acknowledged: whatever is there goes (an empty
		// creation's name, if there, holds nothing).
		if op.kind == "mkempty" && hasTo && have[op.to] != 0 {
			fail("ns %s: an empty creation in flight left %d bytes", op.to, have[op.to])
		}
		if hasTo {
			if err := c.Remove(ctx, op.to); err != nil {
				fail("ns rm %s: %v", op.to, err)
			}
			known[op.to] = true // removed here already
		}
		r.nsGone(op.to)
	case "write":
		// Not fsynced: each byte the old one or the written one (or
		// a zero of the hole past the old end); the size between.
		if !hasName {
			fail("ns %s: gone after a write in flight (the name was acknowledged)", op.name)
			delete(m.files, op.name)
			break
		}
		got := read(op.name)
		if len(got) < len(before) || len(got) > len(op.after) {
			fail("ns %s: a write of %d bytes at %d in flight (%d -> %d bytes) left %d bytes", op.name, len(op.data), op.off, len(before), len(op.after), len(got))
		}
		for i := range min(len(got), len(op.after)) {
			if got[i] == op.after[i] || i < len(before) && got[i] == before[i] || i >= len(before) && got[i] == 0 {
				continue
			}
			fail("ns %s: a write of %d bytes at %d in flight left byte %d = %#x, neither the old one (%s) nor the written %#x; its history:\n\t%s",
				op.name, len(op.data), op.off, i, got[i], describeRun(before[min(i, len(before)):]), op.after[i], strings.Join(r.ns.hist[op.name], "\n\t"))
			break
		}
		m.files[op.name] = got
		r.nsNote(op.name, "write of %d bytes at %d in flight at the kill: found %d bytes", len(op.data), op.off, len(got))
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
