package pebblefs

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/zns"
)

// TestH25DNamespacePowerCuts runs random namespace and data operations
// through pebblefs (creates over existing files, renames, removes,
// ReuseForWrite, OpenReadWrite appends, MkdirAll, Remove and RemoveAll
// of directories, file and directory syncs) and cuts the emulated
// device's power after each round, then checks the recovered tree
// against what the package doc promises:
//
//   - the namespace is the one after some prefix of the round's
//     operations, at least up to the last operation that flushed (a
//     file's Sync, a directory's Sync, a rename or ReuseForWrite, a
//     mkdir, a directory's removal);
//   - each file there holds, up to the length it had at its last Sync,
//     the bytes it held then; past that, bytes some version of it held,
//     or zeros;
//   - no file is left in a directory that is gone.
//
// The next round starts from the recovered tree.
func TestH25DNamespacePowerCuts(t *testing.T) {
	name, dev, fd, e := openFrozen(t, 32, "1M", testConfig())
	defer func() { _ = e.Close() }()
	y := New(e)
	seed := uint64(25)
	if s := os.Getenv("H25D_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	rounds, opsPerRound := 24, 40
	if testing.Short() {
		rounds = 8
	}
	dirs := []string{"a", "a/b", "c"}
	names := []string{"x", "y", "z"}
	var checkedCandidates, flushesSeen, reuses, pastLow int
	for round := range rounds {
		m := observe(t, y) // the tree as recovered, all of it durable
		d, err := y.OpenDir("")
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Sync(); err != nil {
			t.Fatal(err)
		}
		states := []nsState{m.ns.clone()}
		low := 0
		var trace []string
		flushed := func() { low = len(states) - 1; flushesSeen++ }
		pickDir := func() string {
			all := append([]string{""}, dirs...)
			return all[rng.IntN(len(all))]
		}
		pickFile := func() string { return y.PathJoin(pickDir(), names[rng.IntN(len(names))]) }
		data := func() []byte {
			b := make([]byte, rng.IntN(3)*rng.IntN(9000))
			for i := range b {
				b[i] = byte(1 + rng.IntN(255)) // never zero: zeros are what did not survive
			}
			return b
		}
		for i := range opsPerRound {
			// The round's last operations flush nothing, so that the cut
			// finds creates and removes not yet durable.
			quiet := i >= opsPerRound-10
			sync := func() bool { return !quiet && rng.IntN(2) == 0 }
			k := rng.IntN(100)
			if quiet {
				k = []int{0, 40, 60}[rng.IntN(3)] // create, append, remove
			}
			var op string
			switch {
			case k < 25: // Create (over a file, maybe), write, maybe sync
				n := pickFile()
				op = "create " + n
				f, err := y.Create(n, vfs.WriteCategoryUnspecified)
				if !m.ns.dirs[y.PathDir(clean(n))] && y.PathDir(clean(n)) != "." || m.ns.dirs[clean(n)] {
					if err == nil {
						t.Fatalf("round %d: %s: succeeded where no file can be", round, op)
					}
					continue
				}
				if err != nil {
					t.Fatalf("round %d: %s: %v", round, op, err)
				}
				if _, replaced := m.ns.files[clean(n)]; replaced {
					// Create removes the old file, then creates: two
					// records, the first of which may be all that lands.
					delete(m.ns.files, clean(n))
					states = append(states, m.ns.clone())
				}
				id := m.newFile()
				m.ns.files[clean(n)] = id
				states = append(states, m.ns.clone())
				b := data()
				if _, err := f.Write(b); err != nil {
					t.Fatal(err)
				}
				m.write(id, 0, b)
				if sync() {
					op += " sync"
					if err := f.Sync(); err != nil {
						t.Fatal(err)
					}
					m.sync(id)
					flushed()
				}
				f.Close()
			case k < 37 || k == 40: // OpenReadWrite an existing file, append
				n := pickFile()
				id, ok := m.ns.files[clean(n)]
				if !ok {
					continue
				}
				op = "append " + n
				f, err := y.OpenReadWrite(n, vfs.WriteCategoryUnspecified)
				if err != nil {
					t.Fatalf("round %d: %s: %v", round, op, err)
				}
				b := data()
				off := int64(len(m.files[id].cur))
				if _, err := f.WriteAt(b, off); err != nil {
					t.Fatal(err)
				}
				m.write(id, off, b)
				if sync() {
					op += " sync"
					if err := f.Sync(); err != nil {
						t.Fatal(err)
					}
					m.sync(id)
					flushed()
				}
				f.Close()
			case k < 50: // rename a file onto a name in an existing directory
				a, b := pickFile(), pickFile()
				ida, ok := m.ns.files[clean(a)]
				if !ok || m.ns.dirs[clean(b)] || (y.PathDir(clean(b)) != "." && !m.ns.dirs[y.PathDir(clean(b))]) {
					continue
				}
				op = "rename " + a + " " + b
				if err := y.Rename(a, b); err != nil {
					t.Fatalf("round %d: %s: %v", round, op, err)
				}
				delete(m.ns.files, clean(a))
				m.ns.files[clean(b)] = ida
				states = append(states, m.ns.clone())
				flushed()
			case k < 58 && k != 40: // ReuseForWrite, overwrite from 0, maybe sync
				a, b := pickFile(), pickFile()
				ida, ok := m.ns.files[clean(a)]
				if !ok || m.ns.dirs[clean(b)] || (y.PathDir(clean(b)) != "." && !m.ns.dirs[y.PathDir(clean(b))]) {
					continue
				}
				op = "reuse " + a + " " + b
				f, err := y.ReuseForWrite(a, b, "pebble-wal")
				if err != nil {
					t.Fatalf("round %d: %s: %v", round, op, err)
				}
				reuses++
				delete(m.ns.files, clean(a))
				m.ns.files[clean(b)] = ida
				states = append(states, m.ns.clone())
				flushed()
				w := data()
				if _, err := f.Write(w); err != nil {
					t.Fatal(err)
				}
				m.write(ida, 0, w)
				if sync() {
					op += " sync"
					if err := f.Sync(); err != nil {
						t.Fatal(err)
					}
					m.sync(ida)
					flushed()
				}
				f.Close()
			case k < 70: // remove a file (durable from the next flush)
				n := pickFile()
				if _, ok := m.ns.files[clean(n)]; !ok {
					continue
				}
				op = "remove " + n
				if err := y.Remove(n); err != nil {
					t.Fatalf("round %d: %s: %v", round, op, err)
				}
				delete(m.ns.files, clean(n))
				states = append(states, m.ns.clone())
			case k < 78: // MkdirAll
				dd := dirs[rng.IntN(len(dirs))]
				op = "mkdirall " + dd
				fresh := false
				for p := dd; p != "."; p = y.PathDir(p) {
					if _, isFile := m.ns.files[p]; isFile {
						fresh = false
						break
					}
					if !m.ns.dirs[p] {
						fresh = true
					}
				}
				err := y.MkdirAll(dd, 0o755)
				if err != nil {
					continue // a file in the way
				}
				for p := dd; p != "."; p = y.PathDir(p) {
					m.ns.dirs[p] = true
				}
				if fresh {
					states = append(states, m.ns.clone())
					flushed()
				}
			case k < 84: // RemoveAll a directory
				dd := dirs[rng.IntN(len(dirs))]
				if !m.ns.dirs[dd] {
					continue
				}
				op = "removeall " + dd
				if err := y.RemoveAll(dd); err != nil {
					t.Fatalf("round %d: %s: %v", round, op, err)
				}
				for n := range m.ns.files {
					if strings.HasPrefix(n, dd+"/") {
						delete(m.ns.files, n)
					}
				}
				for dn := range m.ns.dirs {
					if dn == dd || strings.HasPrefix(dn, dd+"/") {
						delete(m.ns.dirs, dn)
					}
				}
				states = append(states, m.ns.clone())
				flushed()
			case k < 88: // Remove an empty directory
				dd := dirs[rng.IntN(len(dirs))]
				if !m.ns.dirs[dd] || m.hasChildren(dd) {
					continue
				}
				op = "rmdir " + dd
				if err := y.Remove(dd); err != nil {
					t.Fatalf("round %d: %s: %v", round, op, err)
				}
				delete(m.ns.dirs, dd)
				states = append(states, m.ns.clone())
				flushed()
			default: // a directory's Sync
				dd := pickDir()
				if dd != "" && !m.ns.dirs[dd] {
					continue
				}
				op = "syncdir " + dd
				f, err := y.OpenDir(dd)
				if err != nil {
					t.Fatalf("round %d: %s: %v", round, op, err)
				}
				if err := f.Sync(); err != nil {
					t.Fatalf("round %d: %s: %v", round, op, err)
				}
				f.Close()
				flushed()
			}
			trace = append(trace, op)
		}

		// Power cut. Every other round, what was written reached the
		// media first (a drive cache that happened to drain): the
		// records of the quiet tail are there, and recovery must find
		// a state of the round's, the last or one before. One round in
		// eight (every round with PEBBLEFS_CUT_KEEP), each zone kept
		// some of what it took since the last flush (cutKeeping): some
		// of the tail's records, and data, in some zones and not others.
		fd.frozen.Store(true)
		if round%8 == 6 || cutKeepAll() {
			kept, err := cutKeeping(dev.(*zns.Emu), seed<<8^uint64(round))
			if err != nil {
				t.Fatal(err)
			}
			trace = append(trace, "(cut keeping "+kept+")")
		} else {
			if round%2 == 1 {
				if err := dev.(*zns.Emu).Flush(); err != nil {
					t.Fatal(err)
				}
			}
			if err := dev.(*zns.Emu).PowerCut(); err != nil {
				t.Fatal(err)
			}
		}
		_ = e.Close()
		if dev, err = zns.Open(name, zns.Options{}); err != nil {
			t.Fatal(err)
		}
		fd = &frozenDevice{Device: dev}
		if e, err = engine.OpenDevice(fd, testConfig()); err != nil {
			t.Fatalf("round %d: reopen after the cut: %v", round, err)
		}
		y = New(e)

		got := observe(t, y)
		var why []string
		ok := false
		for p := low; p < len(states) && !ok; p++ {
			checkedCandidates++
			if r := m.matches(got, states[p]); r != "" {
				why = append(why, fmt.Sprintf("state %d: %s", p, r))
				continue
			}
			ok = true
			if p > low {
				pastLow++
			}
		}
		if !ok {
			t.Fatalf("round %d: the recovered tree is none of the states %d..%d the round's operations allow:\n%s\nrecovered: %s\noperations:\n%s",
				round, low, len(states)-1, strings.Join(why, "\n"), got.ns, strings.Join(trace, "\n"))
		}
	}
	t.Logf("%d rounds, %d flushing operations, %d ReuseForWrites, %d candidate states checked, %d rounds recovered past the last flushing operation", rounds, flushesSeen, reuses, checkedCandidates, pastLow)
}

// nsState is a namespace: file name → file id, and the directories.
type nsState struct {
	files map[string]int
	dirs  map[string]bool
}

func (s nsState) clone() nsState {
	c := nsState{files: map[string]int{}, dirs: map[string]bool{}}
	for k, v := range s.files {
		c.files[k] = v
	}
	for k := range s.dirs {
		c.dirs[k] = true
	}
	return c
}

func (s nsState) String() string {
	var out []string
	for k := range s.files {
		out = append(out, k)
	}
	for k := range s.dirs {
		out = append(out, k+"/")
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// fileModel is one file's bytes: now, at its last Sync, and every
// version it went through.
type fileModel struct {
	cur, synced []byte
	versions    [][]byte
}

type nsModel struct {
	ns     nsState
	files  map[int]*fileModel
	nextID int
	// contents, for a tree observed after recovery: name → bytes
	contents map[string][]byte
}

func (m *nsModel) newFile() int {
	m.nextID++
	m.files[m.nextID] = &fileModel{synced: []byte{}}
	return m.nextID
}

func (m *nsModel) write(id int, off int64, b []byte) {
	f := m.files[id]
	end := off + int64(len(b))
	if end > int64(len(f.cur)) {
		f.cur = append(f.cur, make([]byte, end-int64(len(f.cur)))...)
	}
	f.cur = slices.Clone(f.cur)
	copy(f.cur[off:], b)
	f.versions = append(f.versions, f.cur)
}

func (m *nsModel) sync(id int) {
	f := m.files[id]
	f.synced = f.cur
}

func (m *nsModel) hasChildren(dir string) bool {
	for n := range m.ns.files {
		if strings.HasPrefix(n, dir+"/") {
			return true
		}
	}
	for n := range m.ns.dirs {
		if strings.HasPrefix(n, dir+"/") {
			return true
		}
	}
	return false
}

// matches says why got (an observed tree) is not the state s with m's
// file data, or "" if it is.
func (m *nsModel) matches(got *nsModel, s nsState) string {
	if got.ns.String() != s.String() {
		return "names differ: " + s.String()
	}
	for n, id := range s.files {
		f := m.files[id]
		b := got.contents[n]
		if len(b) < len(f.synced) {
			return fmt.Sprintf("%s: %d bytes, %d synced", n, len(b), len(f.synced))
		}
		if !bytes.Equal(b[:len(f.synced)], f.synced) {
			return fmt.Sprintf("%s: the synced %d bytes differ", n, len(f.synced))
		}
		for off := len(f.synced); off < len(b); off++ {
			ok := b[off] == 0
			for _, v := range f.versions {
				if ok {
					break
				}
				ok = off < len(v) && v[off] == b[off]
			}
			if !ok {
				return fmt.Sprintf("%s: byte %d (%#x) past the synced %d is no version's", n, off, b[off], len(f.synced))
			}
		}
	}
	return ""
}

// observe reads the whole tree through y, checking that List, Stat and
// the contents agree and that no file is in a directory that is gone.
// The model it returns has every file synced as it is.
func observe(t *testing.T, y *FS) *nsModel {
	t.Helper()
	m := &nsModel{ns: nsState{files: map[string]int{}, dirs: map[string]bool{}}, files: map[int]*fileModel{}, contents: map[string][]byte{}}
	var walk func(dir string)
	walk = func(dir string) {
		l, err := y.List(dir)
		if err != nil {
			t.Fatalf("list %q: %v", dir, err)
		}
		for _, c := range l {
			p := y.PathJoin(dir, c)
			fi, err := y.Stat(p)
			if err != nil {
				t.Fatalf("%q listed in %q, Stat: %v", c, dir, err)
			}
			if fi.IsDir() {
				m.ns.dirs[clean(p)] = true
				walk(p)
				continue
			}
			f, err := y.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(f)
			f.Close()
			if err != nil {
				t.Fatalf("read %s: %v", p, err)
			}
			if int64(len(b)) != fi.Size() {
				t.Fatalf("%s: Stat says %d bytes, read %d", p, fi.Size(), len(b))
			}
			id := m.newFile()
			m.files[id].cur, m.files[id].synced = b, b
			m.ns.files[clean(p)] = id
			m.contents[clean(p)] = b
		}
	}
	walk("")
	// Every engine name is in a directory that exists.
	for _, fi := range y.Engine().List() {
		n := strings.TrimSuffix(fi.Name, "/")
		if dir := y.PathDir(n); dir != "." && !m.ns.dirs[dir] {
			t.Fatalf("engine file %q is in %q, which is no directory", fi.Name, dir)
		}
	}
	return m
}
