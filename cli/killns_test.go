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

// The kill loop's namespace client: through the Go client it creates
// files (write, fsync), truncates them to sizes inside a block, renames
// them to fresh names and unlinks them, one operation at a time, each
// acknowledged only when it returns (truncate, rename and unlink are
// durable then; a created file once its fsync returns). After each kill
// every acknowledged file holds exactly its acknowledged bytes under its
// acknowledged name, and the operation in flight at the kill shows
// either its before or its after, whole: a rename leaves exactly one of
// the two names, a truncate the old bytes or the cut ones.

// nsModel is what the namespace client has had acknowledged.
type nsModel struct {
	files   map[string][]byte   // acknowledged names and bytes
	next    int                 // names are never reused
	pending *nsOp               // in flight when the daemon died
	acked   map[string]int      // operations acknowledged, by kind
	hist    map[string][]string // what happened to each name, for failures
}

// nsNote adds an event to name's history (r.mu held, or the clients stopped).
func (r *killRun) nsNote(name, format string, args ...any) {
	r.ns.hist[name] = append(r.ns.hist[name], fmt.Sprintf("point %d: ", r.pointNo)+fmt.Sprintf(format, args...))
}

// nsOp is one namespace operation: kind, its file, the name a rename
// gives it, and the bytes a truncate leaves.
type nsOp struct {
	kind     string // create, truncate, rename, unlink
	name, to string
	after    []byte
}

// nsClient runs namespace operations until the daemon dies or ctx ends.
func (r *killRun) nsClient(ctx context.Context, seed uint64) {
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
			names = append(names, n)
		}
		slices.Sort(names)
		op := &nsOp{kind: "create"}
		if len(names) >= 3 && rng.IntN(4) != 0 {
			op.kind = []string{"truncate", "rename", "unlink"}[rng.IntN(3)]
			op.name = names[rng.IntN(len(names))]
		}
		if op.kind == "create" || op.kind == "rename" {
			m.next++
			op.to = fmt.Sprintf("ns.%d.%d", r.seed, m.next)
		}
		before := m.files[op.name]
		if op.kind == "truncate" {
			// A size inside a block: the tail's rewrite is part of it.
			size := 1 + rng.IntN(len(before)+3*killBlock)
			if size%killBlock == 0 {
				size++
			}
			op.after = make([]byte, size)
			copy(op.after, before)
		}
		m.pending = op
		r.mu.Unlock()
		if err := r.nsDo(ctx, c, op, rng); err != nil {
			return // the daemon died: op stays pending
		}
		r.mu.Lock()
		switch op.kind {
		case "create":
			m.files[op.to] = op.after
		case "truncate":
			m.files[op.name] = op.after
		case "rename":
			m.files[op.to] = before
			delete(m.files, op.name)
			r.gone[op.name] = true
		case "unlink":
			delete(m.files, op.name)
			r.gone[op.name] = true
		}
		m.pending = nil
		m.acked[op.kind]++
		switch op.kind {
		case "create":
			r.nsNote(op.to, "created %d bytes", len(op.after))
		case "truncate":
			r.nsNote(op.name, "truncated %d -> %d", len(before), len(op.after))
		case "rename":
			r.ns.hist[op.to] = slices.Clone(r.ns.hist[op.name])
			r.nsNote(op.to, "renamed from %s", op.name)
		case "unlink":
			r.nsNote(op.name, "unlinked")
		}
		r.mu.Unlock()
	}
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
	case "truncate":
		h, _, err := c.Open(ctx, op.name, 0)
		if err != nil {
			return err
		}
		defer c.CloseFile(ctx, h)
		return c.Truncate(ctx, h, int64(len(op.after)))
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
	op := m.pending
	m.pending = nil
	if op != nil {
		before, acked := m.files[op.name]
		_, hasName := have[op.name]
		_, hasTo := have[op.to]
		switch op.kind {
		case "create":
			// Not acknowledged: whatever is there goes.
			if hasTo {
				if err := c.Remove(ctx, op.to); err != nil {
					fail("ns rm %s: %v", op.to, err)
				}
				known[op.to] = true // removed here already
			}
			r.gone[op.to] = true
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
			switch {
			case hasName == hasTo:
				fail("ns rename %s -> %s in flight: old name there %v, new name there %v; want exactly one", op.name, op.to, hasName, hasTo)
			case hasTo && acked:
				r.ns.hist[op.to] = slices.Clone(r.ns.hist[op.name])
				r.nsNote(op.to, "renamed from %s in flight at the kill: found done", op.name)
				m.files[op.to] = before
				delete(m.files, op.name)
				r.gone[op.name] = true
			}
		case "unlink":
			if !hasName {
				delete(m.files, op.name)
				r.gone[op.name] = true
			}
		}
	}
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
