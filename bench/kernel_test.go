package bench

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/engine"
)

// fioEnv finds fio and the engine; without them the test skips, unless
// ZONEFOLD_REQUIRE_FIO is set (make test sets it), where it fails.
func fioEnv(t *testing.T) string {
	t.Helper()
	fail := t.Skipf
	if os.Getenv("ZONEFOLD_REQUIRE_FIO") != "" {
		fail = t.Fatalf
	}
	if _, err := exec.LookPath("fio"); err != nil {
		fail("fio is not installed (make fio-engine installs it): %v", err)
	}
	so := os.Getenv("ZONEFOLD_FIO_ENGINE")
	if so == "" {
		so, _ = filepath.Abs("../build/fio/zonefold-engine.so")
	}
	if _, err := os.Stat(so); err != nil {
		fail("the fio engine is not built (make fio-engine): %v", err)
	}
	return so
}

// TestKernelEndToEnd runs bench kernel on a tiny scale with the real fio,
// both device modes, and checks the JSON: every requested job has both
// sides measured in every round, and the ratio and spread follow from
// them. The kernel side's files and the emu device file are gone after.
func TestKernelEndToEnd(t *testing.T) {
	so := fioEnv(t)
	for _, tc := range []struct {
		mode   string
		jobs   []string
		rounds int
	}{
		{KernelNull, []string{"seq128k"}, 2},
		{KernelEmu, []string{"4x1m-end-fsync"}, 1},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			dir := t.TempDir()
			var out bytes.Buffer
			err := Kernel(t.Context(), &out, KernelOptions{Dir: dir, Mode: tc.mode, JobsDir: "../testdata/fio",
				Jobs: tc.jobs, Rounds: tc.rounds, Scale: 1.0 / 64, FioEngine: so, JSON: true,
				Config: engine.Config{CacheBytes: 16 << 20}})
			if err != nil {
				t.Fatal(err)
			}
			var got kernelJSON
			if err := json.Unmarshal(out.Bytes(), &got); err != nil {
				t.Fatalf("not one JSON object: %v\n%s", err, out.String())
			}
			if got.Mode != tc.mode || got.Rounds != tc.rounds || len(got.Jobs) != len(tc.jobs) {
				t.Fatalf("mode %s, %d rounds, %d jobs; want %s, %d, %d:\n%s", got.Mode, got.Rounds, len(got.Jobs),
					tc.mode, tc.rounds, len(tc.jobs), out.String())
			}
			for _, j := range got.Jobs {
				if len(j.ZonefoldRuns) != tc.rounds || len(j.KernelRuns) != tc.rounds ||
					j.ZonefoldMiBps <= 0 || j.KernelMiBps <= 0 || j.ZonefoldSpread < 1 || j.KernelSpread < 1 ||
					j.ZonefoldMin > j.ZonefoldMiBps || j.ZonefoldMiBps > j.ZonefoldMax {
					t.Errorf("job %+v", j)
				}
				if r := j.ZonefoldMiBps / j.KernelMiBps; r != j.Ratio {
					t.Errorf("%s: ratio %v; the medians give %v", j.Name, j.Ratio, r)
				}
			}
			left, _ := filepath.Glob(filepath.Join(dir, "*"))
			if len(left) != 0 {
				t.Errorf("left in DIR: %v", left)
			}
		})
	}
}

// The kernel side's job is the seed job with fio's io_uring engine and no
// zonefold socket; scaling rewrites every size=.
func TestKernelJobText(t *testing.T) {
	seed := "[global]\nioengine=external:${ZONEFOLD_FIO_ENGINE}\nsock=${ZONEFOLD_SOCK}\n[a]\nbs=1m\nsize=32m\n"
	k := kernelJobText(seed)
	if strings.Contains(k, "sock") || strings.Contains(k, "external") || !strings.Contains(k, "ioengine=io_uring\n") {
		t.Errorf("kernel job:\n%s", k)
	}
	for scale, want := range map[float64]string{1: "size=32m", 0.5: "size=16m", 1.0 / 1024: "size=1m", 4: "size=128m"} {
		s, err := scaleJob(seed, scale)
		if err != nil || !strings.Contains(s, want+"\n") {
			t.Errorf("scale %v: %v\n%s", scale, err, s)
		}
	}
	if _, err := scaleJob("size=lots\n", 2); err == nil {
		t.Error("size=lots scaled")
	}
}

// jobBytes counts what a job file writes, the [global] section's values
// applying where a job section has none; kernelCache sizes the daemon's
// cache from the seed jobs at the default scale: twice the largest.
func TestJobBytes(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       int64
	}{
		{"one section", "[a]\nbs=1m\nsize=32m\n", 32 << 20},
		{"numjobs in the section", "[global]\nbs=8k\n[a]\nnumjobs=16\nsize=4m\n", 64 << 20},
		{"numjobs and size from global", "[global]\nnumjobs=4\nsize=2m\n[a]\n[b]\nnumjobs=2\n", 12 << 20},
		{"section overrides global", "[global]\nsize=1g\n[a]\nsize=1m\n", 1 << 20},
		{"global alone writes nothing", "[global]\nsize=1m\n", 0},
		{"comments and spaces", "; size=1g\n[a]\n  size = 3m \n", 3 << 20},
	} {
		got, err := jobBytes(tc.text)
		if err != nil || got != tc.want {
			t.Errorf("%s: jobBytes = %d, %v; want %d", tc.name, got, err, tc.want)
		}
	}
	for _, bad := range []string{"[a]\nnumjobs=0\nsize=1m\n", "[a]\nnumjobs=x\n", "[a]\nsize=lots\n"} {
		if n, err := jobBytes(bad); err == nil {
			t.Errorf("jobBytes(%q) = %d, no error", bad, n)
		}
	}
	jobs, err := loadKernelJobs("../testdata/fio", nil, 16)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"seq128k": 1 << 30, "4x1m-end-fsync": 2 << 30, "16x8k-randwrite": 1 << 30, "4k-qd128": 512 << 20}
	for _, j := range jobs {
		if w, ok := want[j.name]; ok && j.bytes != w {
			t.Errorf("%s at scale 16: %d bytes, want %d", j.name, j.bytes, w)
		}
	}
	if c := kernelCache(jobs); c != 4<<30 {
		t.Errorf("cache for the seed jobs at scale 16: %d, want 4 GiB", c)
	}
	if c := kernelCache([]kernelJob{{bytes: 1 << 20}}); c != 512<<20 {
		t.Errorf("cache for a 1 MiB job: %d, want the 512 MiB floor", c)
	}
	if c := kernelCache([]kernelJob{{bytes: 300<<20 + 1}}); c != 640<<20 {
		t.Errorf("cache for 300 MiB + 1: %d, want 640 MiB (twice, in whole 64 MiB)", c)
	}
}

// In emu mode every zonefold run starts on a new device file whose blocks
// are all allocated, as fio lays out the kernel side's files (a fresh
// directory each run, fallocate before it times): not on the last run's
// file, whose written blocks would turn the writes into overwrites, nor
// on a sparse one that allocates as it writes. Checked just before fio
// starts, with the daemon serving.
func TestKernelEmuRunsStartOnAFreshAllocatedFile(t *testing.T) {
	so := fioEnv(t)
	dir := t.TempDir()
	if _, tmpfs := fileSystemType(dir); tmpfs {
		t.Skip("the emu file stays sparse on tmpfs")
	}
	type birth struct {
		ino  uint64
		born unix.StatxTimestamp
	}
	var seen []birth
	check := func() {
		var st unix.Statx_t
		path := filepath.Join(dir, "zonefold-bench-kernel.dev")
		if err := unix.Statx(unix.AT_FDCWD, path, 0, unix.STATX_BASIC_STATS|unix.STATX_BTIME, &st); err != nil {
			t.Errorf("run %d: %v", len(seen)+1, err)
			return
		}
		if st.Mask&unix.STATX_BTIME == 0 {
			t.Skip("no birth times on this file system")
		}
		if int64(st.Blocks)*512 < int64(st.Size) {
			t.Errorf("run %d: %d of the device file's %d bytes allocated", len(seen)+1, st.Blocks*512, st.Size)
		}
		b := birth{st.Ino, st.Btime}
		if slices.Contains(seen, b) {
			t.Errorf("run %d: the device file of an earlier run (inode %d, born %v)", len(seen)+1, b.ino, b.born)
		}
		seen = append(seen, b)
	}
	var out bytes.Buffer
	err := Kernel(t.Context(), &out, KernelOptions{Dir: dir, Mode: KernelEmu, JobsDir: "../testdata/fio",
		Jobs: []string{"4x1m-end-fsync", "seq128k"}, Rounds: 2, Scale: 1.0 / 64, FioEngine: so, JSON: true,
		Config: engine.Config{CacheBytes: 16 << 20}, testBeforeFio: check})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 4 {
		t.Errorf("%d zonefold runs checked; want 4", len(seen))
	}
}

// Earlier runs' daemons lived in this process: their garbage is collected
// before fio starts, not by a cycle that may land in the timing. Checked
// when fio is about to start: the heap holds little more than what the
// last collection found live.
func TestKernelCollectsBeforeFio(t *testing.T) {
	so := fioEnv(t)
	// The collector's own cycles off: only bench kernel's collection can
	// bring the heap down to what is live. With them on, a cycle that
	// happened to run before fio started passed the test without it (3
	// of 5 runs, review).
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	samples := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}}
	runs := 0
	check := func() {
		runs++
		metrics.Read(samples)
		live, now := samples[0].Value.Uint64(), samples[1].Value.Uint64()
		if now > live+1<<20 {
			t.Errorf("run %d: %d heap bytes at fio's start, %d live at the last collection", runs, now, live)
		}
	}
	var out bytes.Buffer
	err := Kernel(t.Context(), &out, KernelOptions{Dir: t.TempDir(), Mode: KernelNull, JobsDir: "../testdata/fio",
		Jobs: []string{"seq128k"}, Rounds: 3, Scale: 1.0 / 64, FioEngine: so, JSON: true,
		Config: engine.Config{CacheBytes: 16 << 20}, testBeforeFio: check})
	if err != nil {
		t.Fatal(err)
	}
	if runs != 3 {
		t.Errorf("%d zonefold runs checked; want 3", runs)
	}
}

// TestKernelMissingDir: DIR that does not exist is refused before
// anything runs, saying what DIR is for and how to make it. The README's
// `bench kernel build/kdir --mode emu` on a fresh checkout printed
// "stat build/kdir: no such file or directory" and nothing else.
func TestKernelMissingDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kdir")
	err := Kernel(t.Context(), &bytes.Buffer{}, KernelOptions{Dir: dir, Rounds: 1, Scale: 1})
	if err == nil {
		t.Fatal("bench kernel ran with a DIR that does not exist")
	}
	for _, want := range []string{dir, "does not exist", "mkdir -p " + dir} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q; want it to say %q", err, want)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("DIR %s after the refusal: %v; want it still absent", dir, err)
	}
}

// TestJobAndEngineNotFoundSayWhereToLook: run outside the repository's
// root, bench kernel --job X said only "no X.fio in testdata/fio", and
// bench fio|kernel's missing engine only "build it with make
// fio-engine", though the engine may be built elsewhere: both now name
// the flag that points at them.
func TestJobAndEngineNotFoundSayWhereToLook(t *testing.T) {
	if _, err := loadKernelJobs(t.TempDir(), []string{"4k-qd128"}, 1); err == nil || !strings.Contains(err.Error(), "--jobs") {
		t.Errorf("--job of a missing file: %v; want it to name --jobs", err)
	}
	t.Setenv("ZONEFOLD_FIO_ENGINE", "")
	t.Chdir(t.TempDir())
	if _, err := findFioEngine(""); err == nil || !strings.Contains(err.Error(), "--fio-engine") || !strings.Contains(err.Error(), "ZONEFOLD_FIO_ENGINE") {
		t.Errorf("missing engine: %v; want it to name --fio-engine and $ZONEFOLD_FIO_ENGINE", err)
	}
}
