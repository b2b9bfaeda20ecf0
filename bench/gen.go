package bench

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// The workloads bench gc runs. Each is a way files are written and
// overwritten; which placement and GC policy pay off depends on it.
const (
	// WorkUniform fills Files files to the utilisation, then overwrites
	// them at random, every block of every file alike, IODepth writes in
	// flight per file: the xfs zone-affinity benchmark's overwrites.
	WorkUniform = "uniform"
	// WorkHotCold is uniform with skewed overwrites: HotShare of them go
	// to the HotFiles share of the files (80% to 20% by default).
	WorkHotCold = "hotcold"
	// WorkLifetimes writes whole files and deletes them whole, as a
	// log-structured store does: each of Files writers creates a file,
	// writes it sequentially (a size from a quarter of a zone to four
	// zones), syncing every eighth of a zone, fsyncs it and keeps it for a lifetime from a short/long
	// mix; the oldest-to-die files go first whenever room is needed, so
	// utilisation holds at the target.
	WorkLifetimes = "lifetimes"
	// WorkSeed is the xfs series' exact shape: Files files written with
	// random BS writes, IODepth in flight per file, on a device so large
	// for them (seedShare of it written) that GC barely runs: what it
	// measures is the allocation and write path.
	WorkSeed = "seed"
)

// Workloads lists the workloads in the order bench gc runs them.
var Workloads = []string{WorkUniform, WorkHotCold, WorkLifetimes, WorkSeed}

const (
	// seedShare is the share of the capacity the seed workload writes.
	seedShare = 0.2
	// lifetimeBS is the write size of the lifetimes workload: whole
	// files written sequentially, as a store flushes a table.
	lifetimeBS = 128 << 10
	// shortShare of the lifetimes workload's files die young: their
	// lifetime averages shortLife times the target live bytes, counted in
	// bytes written after them; the others average longLife times it. By
	// Little's law the live bytes would average 0.3·0.05 + 0.7·1.6 = 1.135
	// times the target: a little more than room allows, so that the
	// files soonest to die go a little early and utilisation holds at the
	// target.
	shortShare = 0.3
	shortLife  = 0.05
	longLife   = 1.6
)

// Spec is one workload, sized for a backend.
type Spec struct {
	Kind    string
	Files   int     // files (writers, for lifetimes)
	BS      int64   // bytes per write (lifetimes: lifetimeBS)
	IODepth int     // writes in flight per file (lifetimes: 1 per writer)
	Util    float64 // live data as a fraction of the capacity (not seed)
	// HotShare of the overwrites go to HotFiles of the files (hotcold).
	HotShare, HotFiles float64
	// ZoneSize sizes the lifetimes workload's files.
	ZoneSize int64
	Seed     uint64
}

// ParseSkew reads --skew: "80/20" means 80% of the overwrites go to 20%
// of the files.
func ParseSkew(s string) (share, files float64, err error) {
	// ParseFloat, not Sscanf: Sscanf stops at the first byte that is not
	// part of a number, so "80/20/30" and "80x/20" read as 80/20.
	a, b, ok := strings.Cut(s, "/")
	x, err1 := strconv.ParseFloat(a, 64)
	y, err2 := strconv.ParseFloat(b, 64)
	ok = ok && err1 == nil && err2 == nil
	if !ok || !(x > 0 && x < 100) || !(y > 0 && y < 100) {
		return 0, 0, fmt.Errorf("--skew %q: want OPS/FILES in percent, e.g. 80/20", s)
	}
	return x / 100, y / 100, nil
}

// ParseWorkloads checks a list of workload names.
func ParseWorkloads(names []string) ([]string, error) {
	var out []string
	for _, n := range names {
		n = strings.TrimSpace(n)
		if !slices.Contains(Workloads, n) {
			return nil, fmt.Errorf("workload %q: want %s", n, strings.Join(Workloads, ", "))
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no workload to run")
	}
	return out, nil
}

// hotFiles is how many files are hot under hotcold: the share rounded,
// at least one and at least one cold.
func (s Spec) hotFiles() int {
	return min(max(1, int(math.Round(s.HotFiles*float64(s.Files)))), max(1, s.Files-1))
}

// fileSize is the size of each file of the uniform, hotcold and seed
// workloads on a backend of the given capacity.
func (s Spec) fileSize(capacity int64) int64 {
	share := s.Util
	if s.Kind == WorkSeed {
		share = seedShare
	}
	return int64(share*float64(capacity)) / int64(s.Files) / s.BS * s.BS
}

// check says whether the workload fits a backend of the given capacity.
func (s Spec) check(capacity int64) error {
	switch s.Kind {
	case WorkLifetimes:
		if s.ZoneSize <= 0 || int64(s.Util*float64(capacity)) < 4*int64(s.Files)*s.ZoneSize {
			return fmt.Errorf("lifetimes: %d writers of files up to 4 zones of %s need more than %s at --util %v",
				s.Files, human(s.ZoneSize), human(capacity), s.Util)
		}
	default:
		if size := s.fileSize(capacity); size < s.BS*int64(s.IODepth) {
			return fmt.Errorf("%s: a capacity of %s gives each of %d files %s: less than --iodepth writes of --bs",
				s.Kind, human(capacity), s.Files, human(size))
		}
	}
	return nil
}

// Stop tells the generator's writers when to end: they ask it after every
// write with the host bytes written so far.
type Stop func(host int64) bool

// genResult is what the writers of one run did.
type genResult struct {
	Host     int64 // bytes written, fill included
	FillHost int64 // of which the fill phase
	P50, P99 time.Duration
}

// gen runs one workload on a backend: the fill (uniform, hotcold), then
// the writers, until stop says so; host counts every byte written (the
// controller samples it). Latencies are recorded once measuring is set.
type gen struct {
	s         Spec
	b         Backend
	host      atomic.Int64
	measuring atomic.Bool
	// fileWrites counts each file's writes once measuring is set
	// (uniform, hotcold, seed).
	fileWrites []atomic.Int64
	hist       *hdrhistogram.Histogram
	histMu     sync.Mutex
}

func newGen(s Spec, b Backend) *gen {
	return &gen{s: s, b: b, hist: newHist(), fileWrites: make([]atomic.Int64, max(s.Files, 1))}
}

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, int64(10*time.Second), 3) }

// fill lays the uniform and hotcold files out sequentially, all files
// at once, and makes them durable: the state overwrites start from.
func (g *gen) fill(ctx context.Context) ([]BackendFile, error) {
	s := g.s
	size := s.fileSize(g.b.Capacity())
	files := make([]BackendFile, s.Files)
	for i := range files {
		f, err := g.b.Create(fmt.Sprintf("%s.%d", s.Kind, i))
		if err != nil {
			closeAll(files)
			return nil, err
		}
		files[i] = f
	}
	if s.Kind == WorkSeed {
		return files, nil // seed writes into empty files
	}
	err := g.parallel(ctx, s.Files, func(ctx context.Context, i int, buf []byte) error {
		for off := int64(0); off < size; off += s.BS {
			if _, err := files[i].WriteAt(ctx, buf, off); err != nil {
				return err
			}
			g.host.Add(s.BS)
		}
		return files[i].Sync(ctx)
	})
	if err != nil {
		closeAll(files)
		return nil, fmt.Errorf("fill: %w", err)
	}
	return files, nil
}

func closeAll(files []BackendFile) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

// parallel runs n workers, each with its own write buffer, and returns
// the first error; one worker's error cancels the others.
func (g *gen) parallel(ctx context.Context, n int, work func(ctx context.Context, i int, buf []byte) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	bs := g.s.BS
	if g.s.Kind == WorkLifetimes {
		bs = lifetimeBS
	}
	for i := range n {
		wg.Go(func() {
			buf := make([]byte, bs)
			for k := range buf {
				buf[k] = byte(i + k)
			}
			if err := work(ctx, i, buf); err != nil {
				once.Do(func() { first = err })
				cancel()
			}
		})
	}
	wg.Wait()
	return first
}

// write is one timed write of the writers' phase.
func (g *gen) write(ctx context.Context, f BackendFile, buf []byte, off int64, hist *hdrhistogram.Histogram) error {
	t0 := time.Now()
	if _, err := f.WriteAt(ctx, buf, off); err != nil {
		return err
	}
	if g.measuring.Load() {
		_ = hist.RecordValue(int64(time.Since(t0)))
	}
	g.host.Add(int64(len(buf)))
	return nil
}

// fileWritesCV is the coefficient of variation (standard deviation over
// mean) of the files' writes while measuring; 0 without any.
func (g *gen) fileWritesCV() float64 {
	var sum, sq float64
	for i := range g.fileWrites {
		n := float64(g.fileWrites[i].Load())
		sum += n
		sq += n * n
	}
	k := float64(len(g.fileWrites))
	if sum == 0 {
		return 0
	}
	mean := sum / k
	return math.Sqrt(max(sq/k-mean*mean, 0)) / mean
}

func (g *gen) merge(h *hdrhistogram.Histogram) {
	g.histMu.Lock()
	g.hist.Merge(h)
	g.histMu.Unlock()
}

// run fills (where the workload has a fill phase), calls filled, then
// runs the writers until stop, calls ended, and writes everything back.
func (g *gen) run(ctx context.Context, filled func(), stop Stop, ended func()) (genResult, error) {
	var res genResult
	s := g.s
	var err error
	switch s.Kind {
	case WorkLifetimes:
		filled()
		err = g.lifetimes(ctx, stop)
	default:
		var files []BackendFile
		if files, err = g.fill(ctx); err != nil {
			return res, err
		}
		res.FillHost = g.host.Load()
		filled()
		err = g.overwrite(ctx, files, stop)
		closeAll(files)
	}
	if err == nil {
		ended()
		// Untimed: write back what is still cached, so that the device
		// counters cover every byte the workload wrote.
		err = g.b.Sync(ctx)
	}
	res.Host = g.host.Load()
	res.P50 = time.Duration(g.hist.ValueAtQuantile(50))
	res.P99 = time.Duration(g.hist.ValueAtQuantile(99))
	return res, err
}

// overwrite runs the uniform, hotcold and seed writers: IODepth per file,
// each writing BS at a random block (hotcold: of a file drawn by the
// skew; the others: of its own file) until stop.
func (g *gen) overwrite(ctx context.Context, files []BackendFile, stop Stop) error {
	s := g.s
	size := s.fileSize(g.b.Capacity())
	blocks := size / s.BS
	hot := s.hotFiles()
	return g.parallel(ctx, s.Files*s.IODepth, func(ctx context.Context, w int, buf []byte) error {
		rng := rand.New(rand.NewPCG(s.Seed, uint64(w)))
		hist := newHist()
		defer g.merge(hist)
		fi := w / s.IODepth
		for ctx.Err() == nil && !stop(g.host.Load()) {
			if s.Kind == WorkHotCold {
				if rng.Float64() < s.HotShare {
					fi = rng.IntN(hot)
				} else {
					fi = hot + rng.IntN(s.Files-hot)
				}
			}
			if err := g.write(ctx, files[fi], buf, rng.Int64N(blocks)*s.BS, hist); err != nil {
				return err
			}
			if g.measuring.Load() {
				g.fileWrites[fi].Add(1)
			}
		}
		return ctx.Err()
	})
}

// liveFile is a finished file of the lifetimes workload.
type liveFile struct {
	name  string
	size  int64
	death int64 // host bytes written when it dies
}

// deaths orders live files by death, soonest first.
type deaths []liveFile

func (d deaths) Len() int           { return len(d) }
func (d deaths) Less(i, j int) bool { return d[i].death < d[j].death }
func (d deaths) Swap(i, j int)      { d[i], d[j] = d[j], d[i] }
func (d *deaths) Push(x any)        { *d = append(*d, x.(liveFile)) }
func (d *deaths) Pop() any {
	old := *d
	x := old[len(old)-1]
	*d = old[:len(old)-1]
	return x
}

// lifetimes runs the lifetimes writers until stop.
func (g *gen) lifetimes(ctx context.Context, stop Stop) error {
	s := g.s
	target := int64(s.Util * float64(g.b.Capacity()))
	var mu sync.Mutex // guards live, q and the removals
	var live int64    // bytes of live files and files being written
	var q deaths
	// room removes the files whose time has come, then, soonest to die
	// first, as many more as a new file of size n needs.
	room := func(n int64) error {
		mu.Lock()
		defer mu.Unlock()
		now := g.host.Load()
		for q.Len() > 0 && (q[0].death <= now || live+n > target) {
			f := heap.Pop(&q).(liveFile)
			if err := g.b.Remove(f.name); err != nil {
				return err
			}
			live -= f.size
		}
		live += n
		return nil
	}
	zone := s.ZoneSize
	return g.parallel(ctx, s.Files, func(ctx context.Context, w int, buf []byte) error {
		rng := rand.New(rand.NewPCG(s.Seed, uint64(w)))
		hist := newHist()
		defer g.merge(hist)
		for n := 0; ctx.Err() == nil && !stop(g.host.Load()); n++ {
			// Log-uniform from a quarter of a zone to four zones.
			size := int64(float64(zone) / 4 * math.Pow(16, rng.Float64()))
			size = max(lifetimeBS, size/lifetimeBS*lifetimeBS)
			life := shortLife
			if rng.Float64() >= shortShare {
				life = longLife
			}
			life *= rng.ExpFloat64() * float64(target)
			if err := room(size); err != nil {
				return err
			}
			name := fmt.Sprintf("lifetimes.%d.%d", w, n)
			f, err := g.b.Create(name)
			if err != nil {
				return err
			}
			// Sync every eighth of a zone, as a store syncs every so many
			// bytes it writes (RocksDB's bytes_per_sync): a shared zone
			// stream then interleaves the writers' data at that grain,
			// as it would on a device whose zones are far larger than
			// one flush.
			every := max(lifetimeBS, zone/8)
			for off := int64(0); off < size && err == nil; off += lifetimeBS {
				err = g.write(ctx, f, buf, off, hist)
				if err == nil && ((off+lifetimeBS)%every == 0 || off+lifetimeBS >= size) {
					err = f.Sync(ctx)
				}
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			mu.Lock()
			heap.Push(&q, liveFile{name: name, size: size, death: g.host.Load() + int64(life)})
			mu.Unlock()
		}
		return ctx.Err()
	})
}
