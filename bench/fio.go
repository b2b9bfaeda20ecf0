package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/internal/report"
	"github.com/zonefold/zonefold/server"
)

// FioOptions configure bench fio.
type FioOptions struct {
	Workload  Workload      // write or randwrite; each file is one fio job
	Config    engine.Config // the engine both sides run
	FioEngine string        // the engine .so ("": $ZONEFOLD_FIO_ENGINE, else build/fio/zonefold-engine.so)
	Rounds    int           // alternating rounds of each configuration
	JSON      bool
	Force     bool // erase a device that holds data (see CheckErasable)
}

// fioBenchResult is one configuration's totals over all rounds.
type fioBenchResult struct {
	Bytes   int64
	Elapsed time.Duration
}

func (r fioBenchResult) MiBps() float64 { return mibPerS(r.Bytes, r.Elapsed) }

// Fio runs one workload two ways on device (formatted afresh before each
// run, erasing it): fio with fio/engine.c against a daemon serving the
// device from this process, and RunWorkload in process. The two alternate
// in rounds; the ratio daemon/in-process is what the daemon's protocol
// costs.
//
// A bench that fails removes an emu file it created, whichever run failed.
func Fio(ctx context.Context, out io.Writer, device string, o FioOptions) (err error) {
	w, cfg := o.Workload, o.Config
	if w.RW != "write" && w.RW != "randwrite" {
		return fmt.Errorf("--rw %s: bench fio compares writes (write or randwrite)", w.RW)
	}
	if o.Rounds < 1 {
		return errors.New("--rounds must be at least 1")
	}
	if err := CheckErasable(device, o.Force); err != nil {
		return err
	}
	defer func(remove func(error)) { remove(err) }(removeIfCreated(device))
	so, err := findFioEngine(o.FioEngine)
	if err != nil {
		return err
	}
	fioBin, err := exec.LookPath("fio")
	if err != nil {
		return fmt.Errorf("bench fio needs fio (make fio-engine installs it): %w", err)
	}
	w.fioDraws = true // the daemon's rounds are fio's draws
	var inproc, daemon fioBenchResult
	for round := range o.Rounds {
		r, err := inProcessRound(ctx, device, cfg, w)
		var bad *OptionError
		if errors.As(err, &bad) {
			return err // a workload the device cannot hold: no round ran
		}
		if err != nil {
			return fmt.Errorf("round %d in process: %w", round+1, err)
		}
		inproc.Bytes += r.Bytes
		inproc.Elapsed += r.Elapsed
		r, err = daemonRound(ctx, device, cfg, w, fioBin, so)
		if err != nil {
			return fmt.Errorf("round %d through the daemon: %w", round+1, err)
		}
		daemon.Bytes += r.Bytes
		daemon.Elapsed += r.Elapsed
	}
	return printFioBench(out, o.JSON, w, o.Rounds, inproc, daemon)
}

func findFioEngine(flag string) (string, error) {
	p := flag
	if p == "" {
		p = os.Getenv("ZONEFOLD_FIO_ENGINE")
	}
	if p == "" {
		p = filepath.Join("build", "fio", "zonefold-engine.so")
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(abs); err != nil {
		return "", fmt.Errorf("fio engine %s: %w (build it with make fio-engine in the repository, or point --fio-engine or $ZONEFOLD_FIO_ENGINE at it)", abs, err)
	}
	return abs, nil
}

func inProcessRound(ctx context.Context, device string, cfg engine.Config, w Workload) (fioBenchResult, error) {
	// The first round's open refuses files the device cannot hold,
	// before anything (the daemon's round either) erased it.
	e, release, err := openFormattedFor(device, cfg, &w)
	if err != nil {
		return fioBenchResult{}, err
	}
	defer release() // after Close, which the function does itself
	// One pass: the overwrites of later passes (--loops) free whole
	// zones where they rewrite all of them, as sequential ones do, and
	// GC resets those without reading them back. 8 loops of 16 MiB on a
	// 64 MiB null device ran in bench run; bench fio refused them for
	// writing 128 MiB in all.
	pass := w
	pass.Loops = 1
	if e.KeepsNoData() && pass.bytes() > e.Capacity() {
		// Past one fill GC must read zones back, which a null device
		// cannot: the run would end in ENOSPC once the device is full.
		return fioBenchResult{}, errors.Join(fmt.Errorf("the workload writes %s, more than the %s a null: device holds (it keeps no data, so GC cannot reclaim what is overwritten): a larger null: size, a smaller --scale or --size, or an emu: device",
			mib(pass.bytes()), mib(e.Capacity())), e.Close())
	}
	res, err := RunWorkload(ctx, e, w)
	if cerr := e.Close(); err == nil {
		err = cerr
	}
	return fioBenchResult{Bytes: res.Bytes, Elapsed: res.Elapsed}, err
}

// daemonRound serves a freshly formatted device from this process and
// runs the workload as fio jobs through the engine.
func daemonRound(ctx context.Context, device string, cfg engine.Config, w Workload, fioBin, so string) (fioBenchResult, error) {
	dir, err := os.MkdirTemp("", "zonefold-bench-fio")
	if err != nil {
		return fioBenchResult{}, err
	}
	defer os.RemoveAll(dir)
	socket := filepath.Join(dir, "sock")
	l, err := server.Listen(socket)
	if err != nil {
		return fioBenchResult{}, err
	}
	defer l.Close()
	e, release, err := OpenFormatted(device, cfg)
	if err != nil {
		return fioBenchResult{}, err
	}
	defer release() // after Close, which the function does itself
	srv := server.New(e, server.Options{})
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(sctx, l.UnixListener) }()
	res, runErr := runFioJob(ctx, fioBin, so, socket, dir, w)
	stop()
	err = errors.Join(runErr, <-served, e.Close())
	return res, err
}

// fioJSON is the part of fio's JSON output the benchmark reads.
type fioJSON struct {
	Jobs []struct {
		Error int `json:"error"`
		Write struct {
			IOBytes int64 `json:"io_bytes"`
			Runtime int64 `json:"runtime"` // ms
		} `json:"write"`
	} `json:"jobs"`
}

func runFioJob(ctx context.Context, fioBin, so, socket, dir string, w Workload) (fioBenchResult, error) {
	args := []string{
		"--name=bench", "--ioengine=external:" + so, "--sock=" + socket,
		"--numjobs=" + strconv.Itoa(w.Files), "--filename_format=job.$jobnum",
		"--rw=" + w.RW, "--bs=" + strconv.Itoa(w.BS), "--size=" + strconv.FormatInt(w.Size, 10),
		"--iodepth=" + strconv.Itoa(w.IODepth),
		"--iodepth_batch_submit=" + strconv.Itoa(w.IODepth),
		"--iodepth_batch_complete_max=" + strconv.Itoa(w.IODepth),
		"--group_reporting=1", "--output-format=json",
	}
	if w.Loops > 1 {
		// Each job goes over its file as many times as RunWorkload
		// does (fio's io_bytes counts every loop): without it, bench
		// fio set --loops passes in process against one through fio.
		args = append(args, "--loops="+strconv.Itoa(w.Loops))
	}
	if w.EndFsync {
		args = append(args, "--end_fsync=1")
	}
	if w.RW == "randwrite" {
		// RunWorkload draws offsets with replacement; so does fio with
		// norandommap.
		args = append(args, "--norandommap=1", "--randrepeat=0")
	}
	cmd := exec.CommandContext(ctx, fioBin, args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return fioBenchResult{}, fmt.Errorf("fio: %w: %s", err, bytes.TrimSpace(ee.Stderr))
		}
		return fioBenchResult{}, fmt.Errorf("fio: %w", err)
	}
	var js fioJSON
	if err := json.Unmarshal(out, &js); err != nil || len(js.Jobs) != 1 {
		return fioBenchResult{}, fmt.Errorf("fio output: %v (%d job entries)", err, len(js.Jobs))
	}
	j := js.Jobs[0]
	if j.Error != 0 {
		return fioBenchResult{}, fmt.Errorf("fio job error %d", j.Error)
	}
	return fioBenchResult{Bytes: j.Write.IOBytes, Elapsed: time.Duration(j.Write.Runtime) * time.Millisecond}, nil
}

type fioBenchJSON struct {
	Files          int     `json:"files"`
	BS             int     `json:"bs"`
	IODepth        int     `json:"iodepth"`
	RW             string  `json:"rw"`
	SizePerFile    int64   `json:"size_per_file"`
	EndFsync       bool    `json:"end_fsync"`
	Loops          int     `json:"loops"` // passes over each file, on both sides
	Rounds         int     `json:"rounds"`
	InProcessMiBps float64 `json:"in_process_mib_per_s"`
	DaemonMiBps    float64 `json:"daemon_mib_per_s"`
	Ratio          float64 `json:"ratio"`
	// Bytes each side wrote over all rounds: rounds x loops x files x
	// size_per_file on both.
	InProcessBytes int64 `json:"in_process_bytes"`
	DaemonBytes    int64 `json:"daemon_bytes"`
}

func printFioBench(out io.Writer, asJSON bool, w Workload, rounds int, inproc, daemon fioBenchResult) error {
	s := fioBenchJSON{Files: w.Files, BS: w.BS, IODepth: w.IODepth, RW: w.RW, SizePerFile: w.Size, EndFsync: w.EndFsync,
		Loops: max(w.Loops, 1), Rounds: rounds, InProcessMiBps: inproc.MiBps(), DaemonMiBps: daemon.MiBps(),
		InProcessBytes: inproc.Bytes, DaemonBytes: daemon.Bytes}
	if s.InProcessMiBps > 0 {
		s.Ratio = s.DaemonMiBps / s.InProcessMiBps
	}
	if asJSON {
		return WriteJSON(out, s)
	}
	fsync := ""
	if w.EndFsync {
		fsync = ", fsync at the end"
	}
	loops := ""
	if s.Loops > 1 {
		loops = fmt.Sprintf(", %d loops", s.Loops)
	}
	fmt.Fprintf(out, "%s x %s, %s%s, bs %s, iodepth %d%s, %d alternating rounds\n\n",
		report.Plural(w.Files, "file"), given(w.Size), w.RW, loops, given(int64(w.BS)), w.IODepth, fsync, rounds)
	tw := newTable(out)
	fmt.Fprintln(tw, "in-process MiB/s\tfio+daemon MiB/s\tratio\t")
	fmt.Fprintf(tw, "%.1f\t%.1f\t%.2f\t\n", s.InProcessMiBps, s.DaemonMiBps, s.Ratio)
	return tw.Flush()
}
