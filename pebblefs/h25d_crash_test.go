package pebblefs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/zonefold/zonefold/engine"
)

// TestH25DCrashLifecycle is TestCrash for what it does not do: one
// writer (so that a checkpoint's contents are known exactly) commits
// batches with range deletions, ingests tables, excises spans, takes
// checkpoints into other directories of the same FS, flushes, and closes
// and reopens the DB, with memtables (and so WALs) small enough that
// Pebble recycles WALs (ReuseForWrite) all along. Power is cut at a
// random device operation (a third of the cuts tearing the last write,
// one in eight of the others keeping part of each zone's unflushed
// writes: randomCut), the parent recovers: every acknowledged operation is there, the one in
// flight whole or not at all, Pebble's levels are consistent, and every
// checkpoint Checkpoint returned from opens (read-only) holding exactly
// the state it was taken at, in the life it was taken and for two lives
// after (power cuts in between); a checkpoint cut midway is removed.
// A second writer commits keys outside the model all along, so that the
// WAL is appended to while checkpoints copy it.

var h25dEnv = cutEnv{
	"H25D_CRASH_DEV", "H25D_CRASH_LOG", "H25D_CRASH_CUT", "H25D_CRASH_LIFE",
}

const (
	h25dKeys   = 300
	h25dMaxOps = 4000 // cut within this many device operations
)

// h25dOp is one change in an atomic operation: Set, Delete, Merge, or
// a Range deletion [key, end) (a batch's DeleteRange, or an excise).
type h25dOp struct {
	kind     byte
	key, end string
	ver, n   int
}

func (o h25dOp) String() string {
	if o.kind == 'R' {
		return fmt.Sprintf("R %s %s", o.key, o.end)
	}
	return fmt.Sprintf("%c %s %d %d", o.kind, o.key, o.ver, o.n)
}

func parseH25DOps(s string) ([]h25dOp, error) {
	var ops []h25dOp
	for _, part := range strings.Split(s, ";") {
		f := strings.Fields(part)
		if len(f) == 3 && f[0] == "R" {
			ops = append(ops, h25dOp{kind: 'R', key: f[1], end: f[2]})
			continue
		}
		if len(f) != 4 || len(f[0]) != 1 {
			return nil, fmt.Errorf("bad op %q", part)
		}
		ver, err1 := strconv.Atoi(f[2])
		n, err2 := strconv.Atoi(f[3])
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("bad op %q: %w", part, err)
		}
		ops = append(ops, h25dOp{kind: f[0][0], key: f[1], ver: ver, n: n})
	}
	return ops, nil
}

func h25dApply(m model, ops []h25dOp) {
	for _, o := range ops {
		switch o.kind {
		case 'S':
			m[o.key] = crashValue(o.key, o.ver, o.n)
		case 'D':
			delete(m, o.key)
		case 'M':
			m[o.key] = append(append([]byte(nil), m[o.key]...), crashValue(o.key, o.ver, o.n)...)
		case 'R':
			for k := range m {
				if k >= o.key && k < o.end {
					delete(m, k)
				}
			}
		}
	}
}

func cloneModel(m model) model {
	c := make(model, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// h25dOptions: smallOptions with memtables of 64 KiB, so that WALs
// rotate every few dozen commits and obsolete ones are recycled.
func h25dOptions(y vfs.FS) *pebble.Options {
	o := smallOptions(nil)
	o.FS = y
	o.WALDir = os.Getenv("H25D_WALDIR") // the child inherits it
	o.EventListener = nil
	o.MemTableSize = 64 << 10
	o.MemTableStopWritesThreshold = 4
	return o
}

// reuseLogFS notes each WAL reuse in the child's log.
type reuseLogFS struct {
	vfs.FS
	log *os.File
}

func (r reuseLogFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := r.FS.ReuseForWrite(oldname, newname, category)
	if err == nil {
		fmt.Fprintf(r.log, "REUSE %s %s\n", oldname, newname)
	}
	return f, err
}

// h25dSeed is the lifecycle test's seed: 25, or H25D_SEED (the child
// inherits it).
func h25dSeed() uint64 {
	if s := os.Getenv("H25D_SEED"); s != "" {
		n, _ := strconv.ParseUint(s, 10, 64)
		return n
	}
	return 25
}

func h25dKey(i int) string { return fmt.Sprintf("k%04d", i) }

func TestH25DCrashLifecycleChild(t *testing.T) {
	cd, life, die := startCutChild(t, h25dEnv)
	if cd == nil {
		t.Skip("the lifecycle crash test's child process (run by TestH25DCrashLifecycle)")
	}
	at, logf := cd.cutAt, cd.log
	// Past the cut, a call that failed blocks until the process dies.
	frozen := func(what string, err error) {
		if cd.frozen.Load() {
			select {}
		}
		die("%s: %v", what, err)
	}
	e, err := engine.OpenDevice(cd, testConfig())
	if err != nil {
		frozen("open engine", err)
	}
	fsys := reuseLogFS{FS: crashFS{FS: New(e), d: cd}, log: logf}
	o := h25dOptions(fsys)
	o.Logger = childLogger{cd}
	open := func() *pebble.DB {
		db, err := pebble.Open("db", o)
		if err != nil {
			frozen("open Pebble", err)
		}
		fmt.Fprintf(logf, "OPEN\n")
		return db
	}
	db := open()
	// A second writer, of keys outside the model ("bg-", which the
	// parent ignores), commits all along: Pebble's LogWriter appends to
	// the WAL while checkpoints copy it, ingests and excises run, and
	// DBs close (it waits out each close and reopen).
	var dbMu sync.RWMutex
	go func() {
		rng := rand.New(rand.NewPCG(uint64(life), h25dSeed()+1))
		for i := 0; ; i++ {
			v := make([]byte, 1+rng.IntN(1<<rng.IntN(16)))
			for j := range v {
				v[j] = byte(rng.Uint32())
			}
			wo := pebble.NoSync
			if i%4 == 0 {
				wo = pebble.Sync
			}
			dbMu.RLock()
			err := db.Set(fmt.Appendf(nil, "bg-%03d", rng.IntN(200)), v, wo)
			dbMu.RUnlock()
			if err != nil {
				frozen("background set", err)
			}
		}
	}()
	if err := fsys.RemoveAll("ext"); err != nil {
		frozen("remove ext", err)
	}
	if err := fsys.MkdirAll("ext", 0o755); err != nil {
		frozen("mkdir ext", err)
	}
	go func() {
		time.Sleep(2 * time.Minute)
		die("no power cut after 2 minutes (%d device operations, cut at %d)", cd.n.Load(), at)
	}()
	rng := rand.New(rand.NewPCG(uint64(life), h25dSeed()))
	key := func() string { return h25dKey(rng.IntN(h25dKeys)) }
	set := func(k string) h25dOp { return h25dOp{kind: 'S', key: k, ver: rng.IntN(1 << 30), n: 1 + rng.IntN(2048)} }
	rangeOp := func() h25dOp {
		a := rng.IntN(h25dKeys)
		return h25dOp{kind: 'R', key: h25dKey(a), end: h25dKey(min(h25dKeys, a+1+rng.IntN(12)))}
	}
	logOp := func(seq int, kind string, ops []h25dOp) {
		parts := make([]string, len(ops))
		for i, op := range ops {
			parts[i] = op.String()
		}
		fmt.Fprintf(logf, "P %d %s %s\n", seq, kind, strings.Join(parts, ";"))
	}
	ckpts := 0
	var mine []string // checkpoints completed in this life
	for seq := 0; ; seq++ {
		switch k := rng.IntN(100); {
		case k < 70: // a batch
			ops := make([]h25dOp, 1+rng.IntN(4)*rng.IntN(2))
			for i := range ops {
				switch rng.IntN(10) {
				case 0, 1:
					ops[i] = h25dOp{kind: 'D', key: key()}
				case 2:
					ops[i] = h25dOp{kind: 'M', key: key(), ver: rng.IntN(1 << 30), n: 1 + rng.IntN(32)}
				case 3:
					ops[i] = rangeOp()
				default:
					ops[i] = set(key())
				}
			}
			logOp(seq, "B", ops)
			b := db.NewBatch()
			for _, op := range ops {
				switch op.kind {
				case 'S':
					_ = b.Set([]byte(op.key), crashValue(op.key, op.ver, op.n), nil)
				case 'D':
					_ = b.Delete([]byte(op.key), nil)
				case 'M':
					_ = b.Merge([]byte(op.key), crashValue(op.key, op.ver, op.n), nil)
				case 'R':
					_ = b.DeleteRange([]byte(op.key), []byte(op.end), nil)
				}
			}
			if err := b.Commit(pebble.Sync); err != nil {
				frozen(fmt.Sprintf("commit %d", seq), err)
			}
		case k < 80: // an ingested table of sets and deletes
			name := fmt.Sprintf("ext/%02d-%05d.sst", life, seq)
			f, err := fsys.Create(name, vfs.WriteCategoryUnspecified)
			if err != nil {
				frozen("create "+name, err)
			}
			var keys []string
			for range 1 + rng.IntN(30) {
				keys = append(keys, key())
			}
			slices.Sort(keys)
			keys = slices.Compact(keys)
			ops := make([]h25dOp, len(keys))
			for i, k := range keys {
				if rng.IntN(4) == 0 {
					ops[i] = h25dOp{kind: 'D', key: k}
				} else {
					ops[i] = set(k)
				}
			}
			tw := sstable.NewWriter(objstorageprovider.NewFileWritable(f), sstable.WriterOptions{TableFormat: db.TableFormat()})
			for _, op := range ops {
				if op.kind == 'D' {
					err = tw.Delete([]byte(op.key))
				} else {
					err = tw.Set([]byte(op.key), crashValue(op.key, op.ver, op.n))
				}
				if err != nil {
					frozen("write "+name, err)
				}
			}
			if err := tw.Close(); err != nil {
				frozen("close "+name, err)
			}
			logOp(seq, "I", ops)
			st, err := db.IngestWithStats(context.Background(), []string{name})
			if err != nil {
				frozen("ingest "+name, err)
			}
			if st.MemtableOverlappingFiles > 0 { // a flushable ingest, logged in the WAL
				fmt.Fprintf(logf, "FLUSHABLE-INGEST\n")
			}
		case k < 85: // an excise
			op := rangeOp()
			logOp(seq, "X", []h25dOp{op})
			if err := db.Excise(context.Background(), pebble.KeyRange{Start: []byte(op.key), End: []byte(op.end)}); err != nil {
				frozen("excise", err)
			}
		case k < 88: // a checkpoint: the acknowledged state, exactly
			ckpts++
			name := fmt.Sprintf("ck-%02d-%03d", life, ckpts)
			fmt.Fprintf(logf, "CKP %s\n", name)
			var opts []pebble.CheckpointOption
			if rng.IntN(2) == 0 {
				opts = append(opts, pebble.WithFlushedWAL())
			}
			if err := db.Checkpoint(name, opts...); err != nil {
				frozen("checkpoint "+name, err)
			}
			fmt.Fprintf(logf, "CKA %s\n", name)
			mine = append(mine, name)
			continue
		case k < 91 && len(mine) > 2: // remove an older checkpoint of this life's
			name := mine[0]
			mine = mine[1:]
			fmt.Fprintf(logf, "CKR %s\n", name)
			if err := fsys.RemoveAll(name); err != nil {
				frozen("remove checkpoint "+name, err)
			}
			continue
		case k < 95:
			if err := db.Flush(); err != nil {
				frozen("flush", err)
			}
			continue
		default: // close and reopen
			dbMu.Lock()
			if err := db.Close(); err != nil {
				frozen("close Pebble", err)
			}
			fmt.Fprintf(logf, "CLOSED\n")
			db = open()
			dbMu.Unlock()
			continue
		}
		fmt.Fprintf(logf, "A %d\n", seq)
	}
}

// h25dLife is a lifecycle child's log, parsed.
type h25dLife struct {
	acked     [][]h25dOp
	ckptAt    map[string]int // completed checkpoint → how many of acked precede it
	ckptCut   []string       // checkpoints begun, not completed
	pending   []h25dOp
	reuses    int
	opens     int
	removed   int            // checkpoints the child removed (or began to)
	flushable int            // ingests that went in as flushables
	kinds     map[string]int // acknowledged operations by kind
	end       string
	inflight  map[int][]h25dOp
}

func parseH25DLog(t *testing.T, path string) h25dLife {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l := h25dLife{ckptAt: map[string]int{}, kinds: map[string]int{}, inflight: map[int][]h25dOp{}}
	kindOf := map[int]string{}
	begun := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		kind, rest, _ := strings.Cut(line, " ")
		switch kind {
		case "P":
			fs := strings.SplitN(rest, " ", 3)
			seq, _ := strconv.Atoi(fs[0])
			ops, err := parseH25DOps(fs[2])
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if len(l.inflight) != 0 {
				t.Fatalf("%s: two operations in flight at once", path)
			}
			l.inflight[seq], kindOf[seq] = ops, fs[1]
		case "A":
			seq, _ := strconv.Atoi(rest)
			l.acked = append(l.acked, l.inflight[seq])
			l.kinds[kindOf[seq]]++
			delete(l.inflight, seq)
		case "CKP":
			begun[rest] = true
		case "CKA":
			delete(begun, rest)
			l.ckptAt[rest] = len(l.acked)
		case "CKR":
			// Removed, or cut midway: the parent removes what is left.
			delete(l.ckptAt, rest)
			l.ckptCut = append(l.ckptCut, rest)
			l.removed++
		case "REUSE":
			l.reuses++
		case "OPEN":
			l.opens++
		case "FLUSHABLE-INGEST":
			l.flushable++
		case "CLOSED":
		case "FATAL":
			t.Fatalf("child failed before the power cut: %s", line)
		case "IOERR":
			t.Logf("%s: %s", path, line)
		default:
			l.end = line
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, ops := range l.inflight {
		l.pending = ops
	}
	for name := range begun {
		l.ckptCut = append(l.ckptCut, name)
	}
	return l
}

// h25dDump reads the DB's keys of the model (not the background
// writer's "bg-" keys).
func h25dDump(t *testing.T, db *pebble.DB) model {
	t.Helper()
	got := model{}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		got[string(it.Key())] = append([]byte(nil), it.Value()...)
	}
	if err := it.Close(); err != nil {
		t.Fatalf("iterate: %v", err)
	}
	return got
}

func TestH25DCrashLifecycle(t *testing.T) {
	if os.Getenv(h25dEnv.dev) != "" {
		t.Skip("in the child")
	}
	h25dLifecycle(t, 6) // about 2.5 s a life; H25D_LIVES for more
}

// TestH25DCrashLifecycleWALDir is TestH25DCrashLifecycle (2 lives) with the WALs in
// a directory of their own (Options.WALDir), which Pebble creates and
// syncs apart from the DB's.
func TestH25DCrashLifecycleWALDir(t *testing.T) {
	if os.Getenv(h25dEnv.dev) != "" {
		t.Skip("in the child")
	}
	t.Setenv("H25D_WALDIR", "wal")
	h25dLifecycle(t, 2)
}

func h25dLifecycle(t *testing.T, lives int) {
	if testing.Short() {
		lives = (lives + 1) / 2
	}
	if s := os.Getenv("H25D_LIVES"); s != "" {
		lives, _ = strconv.Atoi(s)
	}
	devName := emuDevice(t, 64, "2M")
	cfg := testConfig()
	e := formatOpen(t, devName, 0, cfg)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(h25dSeed(), 4))
	m := model{}
	type ckpt struct {
		name string
		life int
		m    model
	}
	var ckpts []ckpt
	var acked, applied, torn, keeping, reuses, opens, ckptsOK, ckptsCut, ckRemoved, flushable int
	kinds := map[string]int{}
	for life := range lives {
		cut := randomCut(rng, life, h25dMaxOps)
		logPath := runCutLife(t, h25dEnv, "TestH25DCrashLifecycleChild", devName, life, cut)
		l := parseH25DLog(t, logPath)
		if strings.HasPrefix(l.end, "TORN") {
			torn++
		}
		if strings.HasPrefix(l.end, "KEPT") {
			keeping++
			t.Logf("life %d: %.300s", life, l.end) // the zones' share, the seed
		}
		reuses += l.reuses
		opens += l.opens
		for k, n := range l.kinds {
			kinds[k] += n
		}
		for i, ops := range l.acked {
			for name, at := range l.ckptAt {
				if at == i {
					ckpts = append(ckpts, ckpt{name, life, cloneModel(m)})
				}
			}
			h25dApply(m, ops)
			acked++
		}
		for name, at := range l.ckptAt {
			if at == len(l.acked) {
				ckpts = append(ckpts, ckpt{name, life, cloneModel(m)})
			}
		}

		e := reopenEngine(t, devName, cfg)
		y := New(e)
		db, err := pebble.Open("db", h25dOptions(y))
		if err != nil {
			t.Fatalf("life %d (cut %s, %s): reopen Pebble: %v", life, cut, l.end, err)
		}
		got := h25dDump(t, db)
		with := cloneModel(m)
		h25dApply(with, l.pending)
		switch {
		case equalModels(got, m):
		case len(l.pending) > 0 && equalModels(got, with):
			applied++
			m = with
		default:
			k, g, w := firstDiff(got, m)
			t.Fatalf("life %d (cut %s, %s): key %q holds %d bytes (present %v), acknowledged state %d bytes; in flight: %v",
				life, cut, l.end, k, len(g), g != nil, len(w), l.pending)
		}
		if err := db.CheckLevels(nil); err != nil {
			t.Fatalf("life %d: CheckLevels after recovery: %v", life, err)
		}
		if err := db.Set([]byte("parent"), []byte(strconv.Itoa(life)), pebble.Sync); err != nil {
			t.Fatalf("life %d: write after recovery: %v", life, err)
		}
		if err := db.Delete([]byte("parent"), pebble.Sync); err != nil {
			t.Fatalf("life %d: write after recovery: %v", life, err)
		}
		if err := db.Close(); err != nil {
			t.Fatalf("life %d: close Pebble: %v", life, err)
		}

		// Every engine name is in a directory that exists (a RemoveAll
		// cut midway leaves none behind).
		for _, fi := range e.List() {
			n := strings.TrimSuffix(fi.Name, "/")
			if dir := y.PathDir(n); dir != "." {
				if di, err := y.Stat(dir); err != nil || !di.IsDir() {
					t.Fatalf("life %d (cut %s, %s): engine file %q is in %q, which is no directory", life, cut, l.end, fi.Name, dir)
				}
			}
		}
		ckRemoved += l.removed
		flushable += l.flushable
		// A checkpoint cut midway is the caller's to remove.
		for _, name := range l.ckptCut {
			if err := y.RemoveAll(name); err != nil {
				t.Fatalf("life %d: remove the checkpoint %s cut midway: %v", life, name, err)
			}
			if _, err := y.Stat(name); err == nil {
				t.Fatalf("life %d: %s there after RemoveAll", life, name)
			}
			ckptsCut++
		}
		// Every completed checkpoint opens with its state, until two
		// lives after its own.
		kept := ckpts[:0]
		for _, c := range ckpts {
			ro := h25dOptions(y)
			ro.ReadOnly = true
			// A checkpoint holds its WALs; its OPTIONS name the DB's
			// WALDir, which Pebble would otherwise want recovered from.
			ro.WALDir, ro.Unsafe.AllowMissingWALDirs = "", true
			cdb, err := pebble.Open(c.name, ro)
			if err != nil {
				t.Fatalf("life %d: open checkpoint %s (taken in life %d): %v", life, c.name, c.life, err)
			}
			if got := h25dDump(t, cdb); !equalModels(got, c.m) {
				k, g, w := firstDiff(got, c.m)
				t.Fatalf("life %d: checkpoint %s (taken in life %d): key %q holds %d bytes (present %v), want %d bytes",
					life, c.name, c.life, k, len(g), g != nil, len(w))
			}
			if err := cdb.CheckLevels(nil); err != nil {
				t.Fatalf("life %d: checkpoint %s: CheckLevels: %v", life, c.name, err)
			}
			if err := cdb.Close(); err != nil {
				t.Fatalf("life %d: close checkpoint %s: %v", life, c.name, err)
			}
			if c.life == life {
				ckptsOK++
			}
			if life-c.life >= 2 {
				if err := y.RemoveAll(c.name); err != nil {
					t.Fatalf("life %d: remove checkpoint %s: %v", life, c.name, err)
				}
				continue
			}
			kept = append(kept, c)
		}
		ckpts = kept
		if err := e.Close(); err != nil {
			t.Fatalf("life %d: close engine: %v", life, err)
		}
	}
	t.Logf("%d power cuts (%d tearing a write, %d keeping part of each zone's unflushed writes), %d acknowledged operations (%v, %d ingests overlapping the memtable) all recovered, %d in flight recovered whole; %d checkpoints checked, %d removed by the parent (cut midway, or removed by the child: %d); %d WAL reuses, %d DB opens",
		lives, torn, keeping, acked, kinds, flushable, applied, ckptsOK, ckptsCut, ckRemoved, reuses, opens)
	if acked == 0 || kinds["I"] == 0 || kinds["X"] == 0 || ckptsOK == 0 || reuses == 0 || flushable == 0 {
		t.Fatalf("the cuts came too early to test each kind: %d acknowledged (%v), %d checkpoints, %d WAL reuses", acked, kinds, ckptsOK, reuses)
	}
}
