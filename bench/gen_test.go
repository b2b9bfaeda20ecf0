package bench

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
)

// memBackend is a Backend that keeps only each file's size and the bytes
// written to it: enough to check what the generator asks of a backend.
// Its device writes what it is given (WAF 1).
type memBackend struct {
	capacity int64
	mu       sync.Mutex
	sizes    map[string]int64
	written  map[string]int64
	dev      int64
	live     int64 // bytes of files that exist
	maxLive  int64
	removed  int
}

func newMemBackend(capacity int64) *memBackend {
	return &memBackend{capacity: capacity, sizes: map[string]int64{}, written: map[string]int64{}}
}

func (m *memBackend) Capacity() int64 { return m.capacity }

func (m *memBackend) Create(name string) (BackendFile, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.live -= m.sizes[name]
	m.sizes[name] = 0
	return &memFile{m: m, name: name}, nil
}

func (m *memBackend) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	size, ok := m.sizes[name]
	if !ok {
		return fmt.Errorf("remove %q: no such file", name)
	}
	delete(m.sizes, name)
	m.live -= size
	m.removed++
	return nil
}

func (m *memBackend) Sync(context.Context) error { return nil }

func (m *memBackend) Counters() Counters {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Counters{DevWritten: m.dev, GCWritten: -1, GCResets: -1, GCNanos: -1}
}

type memFile struct {
	m    *memBackend
	name string
}

func (f *memFile) WriteAt(_ context.Context, p []byte, off int64) (int, error) {
	m := f.m
	m.mu.Lock()
	defer m.mu.Unlock()
	size, ok := m.sizes[f.name]
	if !ok {
		return 0, fmt.Errorf("write %q: removed", f.name)
	}
	if end := off + int64(len(p)); end > size {
		m.sizes[f.name] = end
		m.live += end - size
		m.maxLive = max(m.maxLive, m.live)
	}
	m.written[f.name] += int64(len(p))
	m.dev += int64(len(p))
	return len(p), nil
}

func (f *memFile) Sync(context.Context) error { return nil }
func (f *memFile) Close() error               { return nil }

// stopAfter stops the writers once host bytes reach n.
func stopAfter(n int64) Stop { return func(host int64) bool { return host >= n } }

func TestHotColdSendsTheSkewToTheHotFiles(t *testing.T) {
	s := Spec{Kind: WorkHotCold, Files: 10, BS: 4096, IODepth: 2, Util: 0.5, HotShare: 0.8, HotFiles: 0.2, Seed: 3}
	b := newMemBackend(64 << 20)
	g := newGen(s, b)
	fill := s.fileSize(b.capacity) * int64(s.Files)
	if _, err := g.run(t.Context(), func() {}, stopAfter(fill+40<<20), func() {}); err != nil {
		t.Fatal(err)
	}
	var hot, all int64
	for i := range s.Files {
		n := b.written[fmt.Sprintf("hotcold.%d", i)] - s.fileSize(b.capacity) // the overwrites
		all += n
		if i < s.hotFiles() {
			hot += n
		}
	}
	if s.hotFiles() != 2 {
		t.Fatalf("%d hot files of 10 at 20%%; want 2", s.hotFiles())
	}
	if share := float64(hot) / float64(all); math.Abs(share-0.8) > 0.02 {
		t.Errorf("hot files took %.3f of %d overwrite bytes; want 0.8", share, all)
	}
	// Every file was filled first, to its size, and never grew.
	for name, size := range b.sizes {
		if size != s.fileSize(b.capacity) {
			t.Errorf("%s: %d bytes; want %d", name, size, s.fileSize(b.capacity))
		}
	}
}

func TestLifetimesHoldsUtilisation(t *testing.T) {
	const zone = 1 << 20
	s := Spec{Kind: WorkLifetimes, Files: 4, Util: 0.8, ZoneSize: zone, Seed: 5}
	b := newMemBackend(256 << 20)
	if err := s.check(b.capacity); err != nil {
		t.Fatal(err)
	}
	g := newGen(s, b)
	if _, err := g.run(t.Context(), func() {}, stopAfter(4*b.capacity), func() {}); err != nil {
		t.Fatal(err)
	}
	target := int64(s.Util * float64(b.capacity))
	// Room is made before a file is written, for its whole size.
	if b.maxLive > target {
		t.Errorf("live bytes reached %d; the target is %d", b.maxLive, target)
	}
	// After writing the device four times, the live files hold nearly
	// the target: at most one file per writer less.
	if b.live < target-int64(s.Files)*4*zone {
		t.Errorf("live bytes %d at the end; want near the target %d", b.live, target)
	}
	if b.removed == 0 {
		t.Fatal("no file was removed")
	}
	for name, size := range b.sizes {
		if size < zone/4 || size > 4*zone || !strings.HasPrefix(name, "lifetimes.") {
			t.Errorf("%s: %d bytes; want a quarter of a zone to four zones", name, size)
		}
	}
}

func TestSeedWritesItsShareOfTheDevice(t *testing.T) {
	s := Spec{Kind: WorkSeed, Files: 4, BS: 8192, IODepth: 4, Seed: 1}
	b := newMemBackend(64 << 20)
	ph, res, err := runControlled(t.Context(), newGen(s, b), DefaultSteady, 1<<40)
	if err != nil {
		t.Fatal(err)
	}
	want := s.fileSize(b.capacity) * int64(s.Files)
	// Each of the 16 writers stops after the write that reaches the
	// budget: at most one write each past it.
	if res.Host < want || res.Host > want+16*8192 {
		t.Errorf("seed wrote %d bytes; want %d (%.0f%% of the capacity)", res.Host, want, seedShare*100)
	}
	if !ph.steady || ph.from.Host != 0 {
		t.Errorf("seed measured from %d bytes (steady %v); want from the start", ph.from.Host, ph.steady)
	}
}

func TestParseSkewAndWorkloads(t *testing.T) {
	if a, b, err := ParseSkew("90/10"); err != nil || a != 0.9 || b != 0.1 {
		t.Errorf("ParseSkew(90/10) = %v, %v, %v", a, b, err)
	}
	for _, bad := range []string{"80", "80/", "0/20", "80/100", "x/y", ""} {
		if _, _, err := ParseSkew(bad); err == nil {
			t.Errorf("ParseSkew(%q) took it", bad)
		}
	}
	if w, err := ParseWorkloads([]string{"seed", " uniform", "seed"}); err != nil || len(w) != 2 || w[0] != "seed" || w[1] != "uniform" {
		t.Errorf("ParseWorkloads = %v, %v", w, err)
	}
	for _, bad := range [][]string{nil, {"random"}} {
		if _, err := ParseWorkloads(bad); err == nil {
			t.Errorf("ParseWorkloads(%v) took it", bad)
		}
	}
}
