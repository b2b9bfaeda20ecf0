package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/internal/report"
	"github.com/zonefold/zonefold/server"
	"github.com/zonefold/zonefold/zns"
)

// Kernel device modes: what the zonefold side runs on.
const (
	// KernelNull serves a null: device (no storage): zonefold's CPU path
	// against the kernel's page cache on a tmpfs DIR.
	KernelNull = "null"
	// KernelEmu serves an emu device whose file lives in DIR: the same
	// disk and file system as the kernel side, durability included where
	// a job fsyncs.
	KernelEmu = "emu"
	// KernelAuto picks null for a tmpfs DIR and emu for anything else.
	KernelAuto = "auto"
)

// KernelOptions configure bench kernel.
type KernelOptions struct {
	Dir       string        // the kernel file system's directory
	Mode      string        // KernelNull, KernelEmu or KernelAuto ("" is auto)
	JobsDir   string        // the seed job files ("": testdata/fio)
	Jobs      []string      // job names to run (file names without .fio); none: every seed job
	Rounds    int           // alternating rounds (default 5)
	Scale     float64       // multiplies every job's size= (0: 1)
	Config    engine.Config // the daemon's engine
	FioEngine string        // the engine .so ("": $ZONEFOLD_FIO_ENGINE, else build/fio/zonefold-engine.so)
	JSON      bool
	// Progress, if set, gets a line per run.
	Progress io.Writer
	// testBeforeFio, if set, runs on the zonefold side just before fio
	// starts (the daemon serving): tests look at the device's state there.
	testBeforeFio func()
}

// kernelJob is one seed job file.
type kernelJob struct {
	name  string
	text  string // the job file, sizes scaled
	bytes int64  // what it writes: every section's size= times its numjobs
}

// kernelCache is the daemon's cache when --cache is not given: twice the
// largest job's bytes, at least 512 MiB, in whole 64 MiB. The kernel side
// has the machine's memory as its page cache and, at Linux's default
// dirty_ratio (20% of it), writes a seed job at --scale 16 (2 GiB at
// most) without throttling; zonefold throttles writers above half its
// cache, so a cache of twice the job's bytes compares the two on the same
// terms. (A fixed 512 MiB, with the former --scale 4, throttled
// 4x1m-end-fsync's 512 MiB and not the other jobs.)
func kernelCache(jobs []kernelJob) int64 {
	const least, unit = 512 << 20, 64 << 20
	c := int64(least)
	for _, j := range jobs {
		c = max(c, (2*j.bytes+unit-1)/unit*unit)
	}
	return c
}

// jobBytes is what a job file writes: each job section's size= times its
// numjobs=, a [global] section's values applying where a section has none.
func jobBytes(text string) (int64, error) {
	var total, gSize, size int64
	gJobs, jobs := int64(1), int64(1)
	section := ""
	flush := func() {
		if section != "" && section != "global" {
			total += size * jobs
		}
	}
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]") {
			flush()
			section, size, jobs = l[1:len(l)-1], gSize, gJobs
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "size":
			n, err := parseFioSize(strings.TrimSpace(v))
			if err != nil {
				return 0, err
			}
			size = n
		case "numjobs":
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil || n < 1 {
				return 0, fmt.Errorf("numjobs=%s: not a job count", strings.TrimSpace(v))
			}
			jobs = n
		default:
			continue
		}
		if section == "global" {
			gSize, gJobs = size, jobs
		}
	}
	flush()
	return total, nil
}

// kernelSide is one side's results of one job over the rounds: MiB/s, or
// CPU seconds, per round.
type kernelSide []float64

func (s kernelSide) median() float64 { return report.Median(s) }

func (s kernelSide) spread() float64 { return report.Spread(s) }

// kernelJobJSON is one row of bench kernel --json.
// Rates are MiB/s (the project's one rate unit; fio's too), medians over
// the rounds unless the key says min, max or runs.
type kernelJobJSON struct {
	Name           string    `json:"name"`
	ZonefoldMiBps  float64   `json:"zonefold_mib_per_s"`
	ZonefoldMin    float64   `json:"zonefold_min_mib_per_s"`
	ZonefoldMax    float64   `json:"zonefold_max_mib_per_s"`
	KernelMiBps    float64   `json:"kernel_mib_per_s"`
	KernelMin      float64   `json:"kernel_min_mib_per_s"`
	KernelMax      float64   `json:"kernel_max_mib_per_s"`
	Ratio          float64   `json:"ratio"`           // zonefold / kernel, of the medians
	ZonefoldSpread float64   `json:"zonefold_spread"` // max / min
	KernelSpread   float64   `json:"kernel_spread"`
	ZonefoldRuns   []float64 `json:"zonefold_runs_mib_per_s"`
	KernelRuns     []float64 `json:"kernel_runs_mib_per_s"`
	// CPU seconds per run (median and max/min): the daemon's and fio's
	// for zonefold, fio's (its io_uring workers included) for the
	// kernel. A busy machine moves wall time much more than these.
	ZonefoldCPU       float64 `json:"zonefold_cpu_seconds"`
	KernelCPU         float64 `json:"kernel_cpu_seconds"`
	ZonefoldCPUSpread float64 `json:"zonefold_cpu_spread"`
	KernelCPUSpread   float64 `json:"kernel_cpu_spread"`
}

type kernelJSON struct {
	Mode   string          `json:"mode"`
	Device string          `json:"device"`
	Dir    string          `json:"dir"`
	FSType string          `json:"fs_type"`
	Rounds int             `json:"rounds"`
	Scale  float64         `json:"scale"`
	Cache  int64           `json:"cache_bytes"`
	Jobs   []kernelJobJSON `json:"jobs"`
}

// Kernel runs each seed job file two ways, alternating in rounds: through
// fio's zonefold engine against a daemon this process serves on a freshly
// formatted device, and through fio's own io_uring engine (buffered, the
// kernel's page cache) in o.Dir. It prints per job the median, min and
// max MiB/s of each side and the ratio of the medians.
func Kernel(ctx context.Context, out io.Writer, o KernelOptions) error {
	if o.Rounds < 1 {
		return fmt.Errorf("--rounds %d: want at least 1", o.Rounds)
	}
	if o.Scale == 0 {
		o.Scale = 1
	}
	if o.Scale < 0 {
		return fmt.Errorf("--scale %v: want a positive factor", o.Scale)
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return err
	}
	if st, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s does not exist: bench kernel runs the kernel side in DIR (and, in emu mode, zonefold's device file); create it on the file system to compare with (mkdir -p %s)", o.Dir, o.Dir)
	} else if err != nil {
		return fmt.Errorf("DIR: %w", err)
	} else if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", o.Dir)
	}
	fsType, tmpfs := fileSystemType(dir)
	mode := o.Mode
	switch mode {
	case "", KernelAuto:
		mode = KernelEmu
		if tmpfs {
			mode = KernelNull
		}
	case KernelNull, KernelEmu:
	default:
		return fmt.Errorf("--mode %q: want auto, null or emu", o.Mode)
	}
	jobs, err := loadKernelJobs(o.JobsDir, o.Jobs, o.Scale)
	if err != nil {
		return err
	}
	so, err := findFioEngine(o.FioEngine)
	if err != nil {
		return err
	}
	fioBin, err := exec.LookPath("fio")
	if err != nil {
		return fmt.Errorf("bench kernel needs fio (make fio-engine installs it): %w", err)
	}
	dev := kernelDeviceFor(mode, dir, tmpfs)
	if dev.file != "" {
		defer os.Remove(dev.file)
	}
	// Before any round: a job the device cannot hold met ENOSPC in its
	// first zonefold round, after earlier jobs' rounds had run. Before
	// the cache is sized from the jobs, too: a job too large for the
	// device made a cache too large for memory, and the engine's check
	// of that was all --scale 1000 said (exit 1).
	if err := checkKernelJobsFit(dev, o.Config, jobs); err != nil {
		return err
	}
	if o.Config.CacheBytes <= 0 {
		o.Config.CacheBytes = kernelCache(jobs)
	}
	res := kernelJSON{Mode: mode, Device: dev.spec, Dir: dir, FSType: fsType, Rounds: o.Rounds, Scale: o.Scale,
		Cache: o.Config.CacheBytes}
	for _, j := range jobs {
		var zf, kern, zfCPU, kernCPU kernelSide
		for round := range o.Rounds {
			// The side that goes first alternates, so that neither
			// always inherits the other's leftovers (writeback, caches).
			for i := range 2 {
				var r fioRun
				var err error
				side := "zonefold"
				if (round+i)%2 == 0 {
					r, err = zonefoldFioRun(ctx, dev, o.Config, fioBin, so, j, o.testBeforeFio)
					zf, zfCPU = append(zf, r.mibps), append(zfCPU, r.cpu.Seconds())
				} else {
					side = "kernel"
					r, err = kernelFioRun(ctx, dir, fioBin, j)
					kern, kernCPU = append(kern, r.mibps), append(kernCPU, r.cpu.Seconds())
				}
				if err != nil {
					return fmt.Errorf("%s, round %d, %s: %w", j.name, round+1, side, err)
				}
				if o.Progress != nil {
					fmt.Fprintf(o.Progress, "kernel: %s round %d %s %.0f %s, %.2f CPU s\n", j.name, round+1, side, r.mibps, report.RateUnit, r.cpu.Seconds())
				}
				// Untimed: what one side left dirty in DIR's file system
				// is not the next one's to write back.
				syncDir(dir)
			}
		}
		row := kernelJobJSON{Name: j.name,
			ZonefoldMiBps: zf.median(), ZonefoldMin: slices.Min(zf), ZonefoldMax: slices.Max(zf),
			KernelMiBps: kern.median(), KernelMin: slices.Min(kern), KernelMax: slices.Max(kern),
			ZonefoldSpread: zf.spread(), KernelSpread: kern.spread(), ZonefoldRuns: zf, KernelRuns: kern,
			ZonefoldCPU: zfCPU.median(), KernelCPU: kernCPU.median(),
			ZonefoldCPUSpread: zfCPU.spread(), KernelCPUSpread: kernCPU.spread()}
		if row.KernelMiBps > 0 {
			row.Ratio = row.ZonefoldMiBps / row.KernelMiBps
		}
		res.Jobs = append(res.Jobs, row)
	}
	if o.JSON {
		return WriteJSON(out, res)
	}
	return printKernel(out, res)
}

func printKernel(out io.Writer, r kernelJSON) error {
	fmt.Fprintf(out, "zonefold (fio + daemon on %s, cache %s) vs the kernel (fio io_uring, buffered, in %s: %s)\n",
		r.Device, human(r.Cache), r.Dir, r.FSType)
	fmt.Fprintf(out, "%d alternating rounds, job sizes x%g; %s median (min-max)\n\n", r.Rounds, r.Scale, report.RateUnit)
	tw := newTable(out)
	fmt.Fprintln(tw, "job\tzonefold\t(min-max)\tspread\tkernel\t(min-max)\tspread\tratio\t")
	for _, j := range r.Jobs {
		fmt.Fprintf(tw, "%s\t%.0f\t(%.0f-%.0f)\t%.2f\t%.0f\t(%.0f-%.0f)\t%.2f\t%.2f\t\n", j.Name,
			j.ZonefoldMiBps, j.ZonefoldMin, j.ZonefoldMax, j.ZonefoldSpread,
			j.KernelMiBps, j.KernelMin, j.KernelMax, j.KernelSpread, j.Ratio)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nCPU seconds per run, median (spread): a busy machine moves wall time, much less these\n\n")
	tw = newTable(out)
	fmt.Fprintln(tw, "job\tzonefold\tspread\tkernel\tspread\t")
	for _, j := range r.Jobs {
		fmt.Fprintf(tw, "%s\t%.3f\t%.2f\t%.3f\t%.2f\t\n", j.Name,
			j.ZonefoldCPU, j.ZonefoldCPUSpread, j.KernelCPU, j.KernelCPUSpread)
	}
	return tw.Flush()
}

// fileSystemType names dir's file system and says whether it is tmpfs.
func fileSystemType(dir string) (string, bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return "unknown", false
	}
	switch st.Type {
	case unix.TMPFS_MAGIC:
		return "tmpfs", true
	case unix.EXT4_SUPER_MAGIC:
		return "ext4", false
	case unix.XFS_SUPER_MAGIC:
		return "xfs", false
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs", false
	}
	return fmt.Sprintf("fs 0x%x", st.Type), false
}

// syncDir writes back dir's file system (best effort: it only keeps one
// run's writeback out of the next).
func syncDir(dir string) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return
	}
	_ = unix.Syncfs(fd)
	unix.Close(fd)
}

// loadKernelJobs reads the seed job files of dir: every *.fio except the
// verify-* ones, or those named in only.
func loadKernelJobs(dir string, only []string, scale float64) ([]kernelJob, error) {
	if dir == "" {
		dir = filepath.Join("testdata", "fio")
	}
	paths, err := filepath.Glob(filepath.Join(dir, "*.fio"))
	if err != nil {
		return nil, err
	}
	var jobs []kernelJob
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".fio")
		if len(only) > 0 && !slices.Contains(only, name) || len(only) == 0 && strings.HasPrefix(name, "verify-") {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		text, err := scaleJob(string(b), scale)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		n, err := jobBytes(text)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		jobs = append(jobs, kernelJob{name: name, text: text, bytes: n})
	}
	for _, n := range only {
		if !slices.ContainsFunc(jobs, func(j kernelJob) bool { return j.name == n }) {
			return nil, fmt.Errorf("--job %s: no %s.fio in %s: run from the repository's root or point --jobs at the job files", n, n, dir)
		}
	}
	if len(jobs) == 0 {
		return nil, fmt.Errorf("no seed job files (*.fio) in %s: run from the repository's root or pass --jobs", dir)
	}
	return jobs, nil
}

// scaleJob multiplies the size= of every section by scale, rounding up to
// a whole MiB (every seed job's block size divides 1 MiB).
func scaleJob(text string, scale float64) (string, error) {
	if scale == 1 {
		return text, nil
	}
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		k, v, ok := strings.Cut(strings.TrimSpace(l), "=")
		if !ok || strings.TrimSpace(k) != "size" {
			continue
		}
		n, err := parseFioSize(strings.TrimSpace(v))
		if err != nil {
			return "", err
		}
		const mib = 1 << 20
		f := float64(n) * scale
		if f > math.MaxInt64-mib {
			// int64 of it wrapped: --scale 1e12 ran size=1m.
			return "", badOption(fmt.Errorf("--scale %g makes size=%s %.3g bytes, more than fio sizes go to (8 EiB): lower --scale", scale, strings.TrimSpace(v), f))
		}
		scaled := max((int64(f)+mib-1)/mib, 1)
		lines[i] = "size=" + strconv.FormatInt(scaled, 10) + "m"
	}
	return strings.Join(lines, "\n"), nil
}

// parseFioSize reads a fio size: a number with an optional k, m, g or t
// (powers of 1024, fio's default kb_base).
func parseFioSize(s string) (int64, error) {
	t := strings.ToLower(s)
	t = strings.TrimSuffix(strings.TrimSuffix(t, "b"), "i")
	mult := int64(1)
	if t != "" {
		if i := strings.IndexByte("kmgt", t[len(t)-1]); i >= 0 {
			mult = 1 << (10 * (i + 1))
			t = t[:len(t)-1]
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size=%q: not a size bench kernel can scale", s)
	}
	return n * mult, nil
}

// checkKernelJobsFit refuses, as checkFits does (an OptionError), a job
// whose files the zonefold side's device cannot hold (its fio job's
// workloads, kernelJobWorkloads), before anything is formatted. An emu
// device's file is made for the look and removed.
func checkKernelJobsFit(dev kernelDevice, cfg engine.Config, jobs []kernelJob) error {
	if dev.file != "" {
		// bench kernel's own scratch, as fresh removes it before each
		// round: one a killed run left, of another geometry, would fail
		// the open.
		if err := os.Remove(dev.file); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("device %s: %w", dev.spec, err)
		}
	}
	z, err := zns.Open(dev.spec, zns.Options{})
	if err != nil {
		return fmt.Errorf("device %s: %w", dev.spec, err)
	}
	l, err := engine.FreshLayout(z, cfg)
	z.Close()
	if dev.file != "" {
		os.Remove(dev.file)
	}
	if err != nil {
		return fmt.Errorf("device %s: %w", dev.spec, err)
	}
	for _, j := range jobs {
		ws, err := kernelJobWorkloads(j.text)
		if err != nil {
			return fmt.Errorf("job %s: %w", j.name, err)
		}
		if err := checkAllFit(ws, l, "lower --scale, or leave the job out (--job)"); err != nil {
			return fmt.Errorf("job %s on %s: %w", j.name, dev.spec, err)
		}
	}
	return nil
}

// kernelJobWorkloads is what a job file's fio leaves on the device, for
// the fits check: a workload for each job section's files, numjobs= x
// nrfiles= of them (or the names in its filename=, which its jobs
// share), each of filesize= (the largest of a range) or its share of
// size=, in the largest of its bs= values (bs=4k,8k; bsrange=; bssplit=) at its
// iodepth=, loops= times (more where io_size= or time_based writes on
// past the files' size), randwrite where its rw= writes at random,
// drawn by fio (fioDraws). [global] values apply to the sections after
// it. Sections naming the same filename= share the file: it counts
// once, at the largest of them, its writes' passes added up (a second
// pass overwrites). Counting every section as files of the largest
// section's size (and leaving nrfiles= and filesize= out) refused a job
// of a large section and a small one that fit, and let many small files
// through whose record headers did not.
func kernelJobWorkloads(text string) ([]Workload, error) {
	type section struct {
		name                                          string
		size, fileSize, jobs, files, bs, depth, n, io int64
		rw, filename                                  string
		timeBased                                     bool
	}
	global := section{name: "[global]", jobs: 1, files: 1, bs: 4096, depth: 1, n: 1, rw: "write"}
	cur := &global
	var all []section
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]") {
			if l == "[global]" {
				cur = &global
				continue
			}
			all = append(all, global)
			cur = &all[len(all)-1]
			cur.name = l
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if !ok && l != "time_based" {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		var err error
		switch k {
		case "size":
			cur.size, err = parseFioSize(v)
		case "io_size", "io_limit":
			cur.io, err = parseFioSize(v)
		case "time_based":
			cur.timeBased = v != "0"
		case "filesize":
			cur.fileSize, err = largestFioSize(v)
		case "bs", "blocksize", "bsrange", "blocksize_range", "bssplit":
			cur.bs, err = largestFioSize(v)
		case "numjobs":
			cur.jobs, err = fioCount(k, v)
		case "nrfiles":
			cur.files, err = fioCount(k, v)
		case "iodepth":
			cur.depth, err = fioCount(k, v)
		case "loops":
			cur.n, err = fioCount(k, v)
		case "rw", "readwrite":
			cur.rw, _, _ = strings.Cut(v, ":")
		case "filename":
			cur.filename = v
		}
		if err != nil {
			return nil, fmt.Errorf("%s %w", cur.name, err)
		}
	}
	var ws []Workload
	shared := map[string]int{} // a filename='s workload in ws
	for _, sec := range all {
		perJob, files := sec.files, sec.jobs*sec.files // a job's size= spreads over its files
		if sec.filename != "" {
			perJob = int64(strings.Count(sec.filename, ":") + 1)
			files = perJob
		}
		if files > 1<<20 {
			return nil, fmt.Errorf("%s: numjobs= x nrfiles= of %d files: bench kernel counts up to %d", sec.name, files, 1<<20)
		}
		w := Workload{Files: int(files), BS: int(sec.bs), IODepth: int(sec.depth), RW: "write", Loops: int(sec.n), fioDraws: true}
		if sec.filename != "" {
			// Its numjobs= jobs write the same files: their writes in
			// flight on each add up.
			w.IODepth *= int(sec.jobs)
		}
		w.Size = sec.fileSize
		if w.Size == 0 {
			w.Size = sec.size / perJob
		}
		if w.Size < int64(w.BS) {
			return nil, fmt.Errorf("%s: its files are of %d bytes (size= or filesize=), less than a bs= of %d: fio needs one of a bs or more", sec.name, w.Size, w.BS)
		}
		if sec.rw == "randwrite" || sec.rw == "randrw" {
			w.RW = "randwrite"
		}
		// Writing on past the files' size (io_size=, time_based)
		// overwrites them, as further loops= do.
		if per := w.Size * perJob; w.Size <= math.MaxInt64/perJob && sec.io > per {
			// At most 2^20 passes: past 2 they only say it overwrites.
			w.Loops = int(min(ceilDiv(sec.io, per), 1<<20/int64(w.Loops)) * int64(w.Loops))
		}
		if sec.timeBased {
			w.Loops = max(w.Loops, 2)
		}
		if sec.rw == "read" || sec.rw == "randread" {
			w.Loops = 0 // lays the files out, does not write them again
		}
		i, ok := shared[sec.filename]
		if sec.filename == "" || !ok {
			if sec.filename != "" {
				shared[sec.filename] = len(ws)
			}
			ws = append(ws, w)
			continue
		}
		o := &ws[i]
		o.Size, o.BS, o.IODepth = max(o.Size, w.Size), max(o.BS, w.BS), max(o.IODepth, w.IODepth)
		o.Loops += w.Loops
		if w.RW == "randwrite" {
			o.RW = w.RW
		}
	}
	if len(ws) == 0 {
		return nil, errors.New("no job section")
	}
	for i := range ws {
		ws[i].Loops = max(ws[i].Loops, 1)
	}
	return ws, nil
}

// fioCount is the value v of fio option k that counts something
// (numjobs=, nrfiles=, iodepth=, loops=): 1 to 2^20.
func fioCount(k, v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 || n > 1<<20 {
		return n, fmt.Errorf("%s=%s: not a count of 1 to %d", k, v, 1<<20)
	}
	return n, nil
}

// largestFioSize is the largest of the sizes in a fio option that takes
// one for each direction (bs=4k,8k), a range (bsrange=1k-4k,
// filesize=1m:4m) or shares (bssplit=4k/50:64k/50).
func largestFioSize(v string) (int64, error) {
	var most int64
	for _, part := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == '-' || r == ':' }) {
		part, _, _ = strings.Cut(part, "/") // bssplit=4k/50:64k/50: a size's share
		n, err := parseFioSize(strings.TrimSpace(part))
		if err != nil {
			return 0, err
		}
		most = max(most, n)
	}
	if most == 0 {
		return 0, fmt.Errorf("%q: no size", v)
	}
	return most, nil
}

// kernelJobText turns a seed job into the kernel side's: fio's io_uring
// engine (buffered I/O, the page cache) instead of zonefold's, and no
// socket option.
func kernelJobText(text string) string {
	var b strings.Builder
	for _, l := range strings.Split(text, "\n") {
		k, _, _ := strings.Cut(strings.TrimSpace(l), "=")
		switch strings.TrimSpace(k) {
		case "sock":
			continue
		case "ioengine":
			l = "ioengine=io_uring"
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// kernelDevice is the zonefold side's device: its spec and, in emu mode,
// its file in DIR.
type kernelDevice struct {
	spec   string
	file   string // "": null, no file
	sparse bool   // leave the file sparse (tmpfs: fallocate would pin its size in memory)
}

// kernelDeviceFor is the zonefold side's device in mode (KernelNull or
// KernelEmu, whose file is in dir, sparse on a tmpfs).
func kernelDeviceFor(mode, dir string, tmpfs bool) kernelDevice {
	if mode != KernelEmu {
		return kernelDevice{spec: "null:?size=16G&zone_size=256M"}
	}
	file := filepath.Join(dir, "zonefold-bench-kernel.dev")
	return kernelDevice{spec: "emu:" + file + "?zone_size=64M&zones=64", file: file, sparse: tmpfs}
}

// fresh gives an emu device a new file for one run, as fio gives the
// kernel side new files each run: the last run's file is removed (its
// written blocks would make this run's writes plain overwrites, where
// the first run and the kernel side allocate), a new one is formatted
// at the device's size, and its blocks are allocated as unwritten
// extents with fallocate, as fio lays out its files before it times
// (fallocate=native, its default). Neither side's timing then includes
// block allocation, and both convert unwritten extents as they write.
func (d kernelDevice) fresh() error {
	if d.file == "" {
		return nil
	}
	if err := os.Remove(d.file); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	z, err := zns.Open(d.spec, zns.Options{})
	if err != nil {
		return err
	}
	if err := z.Close(); err != nil || d.sparse {
		return err
	}
	f, err := os.OpenFile(d.file, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, st.Size()); err != nil {
		return fmt.Errorf("fallocate %s: %w", d.file, err)
	}
	return nil
}

// zonefoldFioRun serves a freshly formatted device (on a fresh file, see
// kernelDevice.fresh) from this process (the daemon's code, server.Run)
// and runs the job through fio's zonefold engine against it; the file is
// removed after. Its CPU time is fio's and this process's while fio ran.
// beforeFio, if set, runs just before fio starts.
func zonefoldFioRun(ctx context.Context, dev kernelDevice, cfg engine.Config, fioBin, so string, j kernelJob, beforeFio func()) (fioRun, error) {
	if err := dev.fresh(); err != nil {
		return fioRun{}, fmt.Errorf("device %s: %w", dev.spec, err)
	}
	if dev.file != "" {
		defer os.Remove(dev.file)
	}
	tmp, err := os.MkdirTemp("", "zonefold-bench-kernel")
	if err != nil {
		return fioRun{}, err
	}
	defer os.RemoveAll(tmp)
	socket := filepath.Join(tmp, "sock")
	var r fioRun
	err = withDaemon(ctx, dev.spec, socket, cfg, func() error {
		if beforeFio != nil {
			beforeFio()
		}
		before := report.ProcessCPU()
		var err error
		r, err = runFioFile(ctx, fioBin, tmp, j.text, "ZONEFOLD_FIO_ENGINE="+so, "ZONEFOLD_SOCK="+socket)
		r.cpu += report.ProcessCPU() - before
		return err
	})
	return r, err
}

// withDaemon runs fn while a daemon serves a freshly formatted device on
// socket, then shuts the daemon down (flush, checkpoint, close).
func withDaemon(ctx context.Context, device, socket string, cfg engine.Config, fn func() error) error {
	dctx, stop := context.WithCancel(ctx)
	defer stop()
	ready := make(chan struct{})
	served := make(chan error, 1)
	go func() {
		served <- server.Run(dctx, server.RunConfig{Device: device, Socket: socket, Format: true, Force: true,
			Engine: cfg, Log: slog.New(slog.DiscardHandler),
			Ready: func(*server.Server, net.Addr) { close(ready) }})
	}()
	select {
	case <-ready:
	case err := <-served:
		return fmt.Errorf("daemon on %s: %w", device, err)
	}
	// This process served every earlier run's daemon too: their engines
	// (tens of MiB of index and buffers each) are garbage now, and the
	// new one's allocations push the heap to the collector's goal about
	// when fio starts. A cycle then (gctrace: one per run, up to 216 ms
	// of mark, mostly the idle workers, which under chrt -f spin on a
	// core fio's processes need) lands in some runs' timing and not in
	// others'. A daemon of its own allocates only at start, so collect
	// now, untimed: no cycle runs while fio does.
	runtime.GC()
	err := fn()
	stop()
	if serr := <-served; serr != nil {
		err = errors.Join(err, fmt.Errorf("daemon on %s: %w", device, serr))
	}
	return err
}

// kernelFioRun runs the job with fio's io_uring engine in a fresh
// directory under dir, then removes it.
func kernelFioRun(ctx context.Context, dir, fioBin string, j kernelJob) (fioRun, error) {
	run, err := os.MkdirTemp(dir, "zonefold-bench-kernel-")
	if err != nil {
		return fioRun{}, err
	}
	defer os.RemoveAll(run)
	return runFioFile(ctx, fioBin, run, kernelJobText(j.text))
}

// fioWriteJSON is the part of fio's JSON output bench kernel reads.
type fioWriteJSON struct {
	Jobs []struct {
		Name  string `json:"jobname"`
		Error int    `json:"error"`
		Write struct {
			BWBytes float64 `json:"bw_bytes"`
		} `json:"write"`
	} `json:"jobs"`
}

// fioRun is one fio run: its jobs' write bandwidth and the CPU time it
// took.
type fioRun struct {
	mibps float64
	cpu   time.Duration
}

// runFioFile runs fio on a job file's text in dir, with env added, and
// returns the jobs' write bandwidth in MiB/s and fio's CPU time (its job
// processes and io_uring workers included).
func runFioFile(ctx context.Context, fioBin, dir, text string, env ...string) (fioRun, error) {
	job := filepath.Join(dir, "job.fio")
	if err := os.WriteFile(job, []byte(text), 0o644); err != nil {
		return fioRun{}, err
	}
	cmd := exec.CommandContext(ctx, fioBin, "--output-format=json", job)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fioRun{}, fmt.Errorf("fio: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	r := fioRun{cpu: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()}
	// fio may print warnings before the JSON object.
	if i := bytes.IndexByte(out, '{'); i > 0 {
		out = out[i:]
	}
	var js fioWriteJSON
	if err := json.Unmarshal(out, &js); err != nil || len(js.Jobs) == 0 {
		return fioRun{}, fmt.Errorf("fio output: %v (%d job entries)", err, len(js.Jobs))
	}
	var bw float64
	for _, jb := range js.Jobs {
		if jb.Error != 0 {
			return fioRun{}, fmt.Errorf("fio job %s: error %d: %s", jb.Name, jb.Error, bytes.TrimSpace(stderr.Bytes()))
		}
		bw += jb.Write.BWBytes
	}
	r.mibps = bw / (1 << 20)
	return r, nil
}
