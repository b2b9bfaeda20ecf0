// Command benchab compares builds of zonefold on `zonefold bench fio`,
// alternating them round by round so that every build sees the same
// machine noise.
//
//	go run ./internal/benchab [--rounds N] [--device DEV] [--jobs seq128k,...] DIR [DIR...]
//
// Each DIR holds a `zonefold` binary and the `zonefold-engine.so` built
// from the same source. For every seed job (the presets and scales of
// `make bench-fio`), each round runs `DIR/zonefold bench fio --rounds 1
// --json` once per build, the first build rotating from round to round;
// each such run alternates in process and fio+daemon itself. Per job and
// build it prints the medians of the in-process and fio+daemon MiB/s
// over the rounds, each side's spread (max/min) and the ratio of the
// medians (fio+daemon / in process); with two builds, also the ratio of
// their fio+daemon medians (B/A). With one DIR it measures that build
// alone, with medians and spreads where `bench fio --rounds N` prints
// totals.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"

	"github.com/zonefold/zonefold/internal/report"
)

// seedJobs are `make bench-fio`'s BENCH_FIO_RUNS: preset and scale.
var seedJobs = []struct{ preset, scale string }{
	{"seq128k", "1"}, {"4x1m", "0.5"}, {"16x8k", "0.1"}, {"4k-qd128", "1"},
}

// sample is one `bench fio --rounds 1` run, in MiB/s.
type sample struct{ inProcess, daemon float64 }

// parseBenchFio reads `bench fio --json`. Builds before the CLI's unit
// convention reported MB/s (10^6 bytes): those are converted.
func parseBenchFio(b []byte) (sample, error) {
	var j struct {
		InProcessMiB *float64 `json:"in_process_mib_per_s"`
		DaemonMiB    *float64 `json:"daemon_mib_per_s"`
		InProcessMB  *float64 `json:"in_process_mbps"`
		DaemonMB     *float64 `json:"daemon_mbps"`
	}
	if err := json.Unmarshal(b, &j); err != nil {
		return sample{}, fmt.Errorf("bench fio's JSON: %w", err)
	}
	switch {
	case j.InProcessMiB != nil && j.DaemonMiB != nil:
		return sample{*j.InProcessMiB, *j.DaemonMiB}, nil
	case j.InProcessMB != nil && j.DaemonMB != nil:
		const mbPerMiB = 1 << 20 / 1e6
		return sample{*j.InProcessMB / mbPerMiB, *j.DaemonMB / mbPerMiB}, nil
	}
	return sample{}, errors.New("bench fio's JSON has neither in_process_mib_per_s nor in_process_mbps")
}

type options struct {
	rounds int
	device string
	jobs   []string
	dirs   []string
}

func run(ctx context.Context, out, progress io.Writer, o options) error {
	for _, d := range o.dirs {
		for _, f := range []string{"zonefold", "zonefold-engine.so"} {
			if _, err := os.Stat(filepath.Join(d, f)); err != nil {
				return fmt.Errorf("build %s: %w", d, err)
			}
		}
	}
	force := make([]bool, len(o.dirs))
	for i, d := range o.dirs {
		var err error
		if force[i], err = knowsForce(ctx, d); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "load average before: %s\n", loadavg())
	for _, job := range seedJobs {
		if !slices.Contains(o.jobs, job.preset) {
			continue
		}
		res := make([][]sample, len(o.dirs))
		for r := range o.rounds {
			for k := range o.dirs {
				i := (r + k) % len(o.dirs)
				s, err := benchFio(ctx, o.dirs[i], o.device, job.preset, job.scale, force[i])
				if err != nil {
					return fmt.Errorf("%s round %d, build %s: %w", job.preset, r+1, o.dirs[i], err)
				}
				res[i] = append(res[i], s)
				fmt.Fprintf(progress, "  %s round %d %s: in process %.1f, fio+daemon %.1f MiB/s\n",
					job.preset, r+1, o.dirs[i], s.inProcess, s.daemon)
			}
		}
		fmt.Fprintf(out, "== %s (scale %s), %d alternating rounds, MiB/s\n", job.preset, job.scale, o.rounds)
		var daemonMedians []float64
		for i, d := range o.dirs {
			var ip, dm []float64
			for _, s := range res[i] {
				ip = append(ip, s.inProcess)
				dm = append(dm, s.daemon)
			}
			mi, md := report.Median(ip), report.Median(dm)
			daemonMedians = append(daemonMedians, md)
			fmt.Fprintf(out, "  %24s: in process %8.1f (spread %.2f)  fio+daemon %8.1f (spread %.2f)  ratio of medians %.2f\n",
				d, mi, report.Spread(ip), md, report.Spread(dm), md/mi)
		}
		if len(o.dirs) == 2 {
			fmt.Fprintf(out, "  fio+daemon, B/A ratio of medians: %.2f\n", daemonMedians[1]/daemonMedians[0])
		}
	}
	fmt.Fprintf(out, "load average after: %s\n", loadavg())
	return nil
}

// knowsForce says whether dir's build has bench fio --force: builds since
// then refuse a device holding data (the previous run's, here) without
// it; builds before it erase the device anyway and reject the flag.
func knowsForce(ctx context.Context, dir string) (bool, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "zonefold"), "bench", "fio", "--help")
	b, err := cmd.Output()
	if err != nil {
		return false, fmt.Errorf("%s: %w", cmd, err)
	}
	return strings.Contains(string(b), "--force"), nil
}

func benchFio(ctx context.Context, dir, device, preset, scale string, force bool) (sample, error) {
	args := []string{"bench", "fio", device,
		"--preset", preset, "--scale", scale, "--rounds", "1", "--json",
		"--fio-engine", filepath.Join(dir, "zonefold-engine.so")}
	if force {
		// The device is benchab's own scratch: each run erases the last's.
		args = append(args, "--force")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "zonefold"), args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return sample{}, fmt.Errorf("%s: %w: %s", cmd, err, strings.TrimSpace(stderr.String()))
	}
	return parseBenchFio(b)
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

func main() {
	var o options
	var jobs string
	fs := flag.NewFlagSet("benchab", flag.ContinueOnError)
	fs.IntVar(&o.rounds, "rounds", 5, "alternating rounds")
	fs.StringVar(&o.device, "device", "emu:build/bench-fio.dev?zone_size=64M&zones=128", "the device bench fio formats and serves")
	var names []string
	for _, j := range seedJobs {
		names = append(names, j.preset)
	}
	fs.StringVar(&jobs, "jobs", strings.Join(names, ","), "seed jobs to run")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: go run ./internal/benchab [--rounds N] [--device DEV] [--jobs a,b] DIR [DIR...]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	o.jobs, o.dirs = strings.Split(jobs, ","), fs.Args()
	if len(o.dirs) == 0 || o.rounds < 1 {
		fs.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout, os.Stderr, o); err != nil {
		fmt.Fprintln(os.Stderr, "benchab:", err)
		os.Exit(1)
	}
}
