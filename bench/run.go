package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/internal/report"
)

// RunOptions configure bench run.
type RunOptions struct {
	Workload Workload
	Config   engine.Config
	JSON     bool
	// Force erases a device that holds data (see CheckErasable).
	Force bool
	// Progress, if set, gets a progress bar (a terminal's stderr).
	Progress io.Writer
}

// Run formats device (erasing it), runs the workload through the engine's
// File API and prints MiB/s, IOPS, latency percentiles and write
// amplification.
//
// A run that fails removes an emu file it created (as every command
// that fails leaves nothing behind); one that succeeds keeps it.
func Run(ctx context.Context, out io.Writer, device string, o RunOptions) (err error) {
	w := o.Workload
	if err := CheckErasable(device, o.Force); err != nil {
		return err
	}
	// Files that cannot fit the device failed only at the end of it,
	// with the engine's admission internals: the open refuses them
	// first, as the usage error they are, before it erases anything.
	e, lock, err := openFormattedLocked(device, o.Config, &w)
	if err != nil {
		return err
	}
	defer func() { // after Close, which the function does itself
		if err != nil {
			lock.Abandon()
		} else {
			lock.Release()
		}
	}()
	if o.Progress != nil {
		bar := newProgress(o.Progress, int64(w.Files)*w.Size, "bench run")
		w.Progress = func(done, _ int64) { _ = bar.Set64(done) }
		defer func() {
			_ = bar.Finish()
			fmt.Fprintln(o.Progress)
		}()
	}
	res, runErr := RunWorkload(ctx, e, w)
	closeErr := e.Close()
	if runErr != nil {
		return runErr
	}
	if closeErr != nil {
		return closeErr
	}
	return printRun(out, o, w, res)
}

type runJSON struct {
	Files        int      `json:"files"`
	BS           int      `json:"bs"`
	IODepth      int      `json:"iodepth"`
	RW           string   `json:"rw"`
	Placement    string   `json:"placement"`
	MiBps        float64  `json:"mib_per_s"`
	IOPS         float64  `json:"iops"`
	P50us        float64  `json:"p50_us"`
	P99us        float64  `json:"p99_us"`
	WAF          *float64 `json:"waf,omitempty"` // none where nothing was written (a read run)
	HostBytes    int64    `json:"host_bytes"`
	DevBytes     int64    `json:"dev_bytes"`
	DevReadBytes int64    `json:"dev_read_bytes"`          // of the bytes a read run read, those read from the device
	CacheEmptied bool     `json:"cache_emptied,omitempty"` // a read run emptied the cache before its timed reads (not --warm-cache)
	GCBytes      int64    `json:"gc_bytes"`
	ZonesReset   int64    `json:"zones_reset"`
	SQEsPerEnter *float64 `json:"sqes_per_enter,omitempty"` // none where the ring was never entered (reads the cache served)
	Seconds      float64  `json:"seconds"`
}

func runSummary(o RunOptions, w Workload, r WorkloadResult) runJSON {
	s := runJSON{
		Files: w.Files, BS: w.BS, IODepth: w.IODepth, RW: w.RW, Placement: o.Config.Policy.String(),
		MiBps: r.MiBps(), IOPS: r.IOPS(),
		P50us: micros(r.P50), P99us: micros(r.P99),
		HostBytes: r.Stats.HostWritten, DevBytes: r.Stats.DevWritten(), DevReadBytes: r.Stats.DevRead,
		GCBytes: r.Stats.GCWritten, ZonesReset: r.Stats.GCResets,
		Seconds:      r.Elapsed.Seconds(),
		CacheEmptied: (w.RW == "read" || w.RW == "randread") && !w.WarmCache,
	}
	if r.Stats.HostWritten > 0 {
		// A run that wrote nothing has no write amplification: 0 read
		// as "writes cost nothing".
		waf := r.Stats.WAF()
		s.WAF = &waf
	}
	if r.Stats.Ring.SubmitEnters > 0 {
		n := r.Stats.Ring.SQEsPerEnter()
		s.SQEsPerEnter = &n
	}
	return s
}

// ratioText is a ratio as the table prints it, "-" where there is none.
func ratioText(v *float64, format string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf(format, *v)
}

func printRun(out io.Writer, o RunOptions, w Workload, r WorkloadResult) error {
	s := runSummary(o, w, r)
	if o.JSON {
		return WriteJSON(out, s)
	}
	fmt.Fprintf(out, "%s x %s, %s, bs %s, iodepth %d, placement %s\n\n",
		report.Plural(w.Files, "file"), given(w.Size), w.RW, given(int64(w.BS)), w.IODepth, s.Placement)
	tw := newTable(out)
	fmt.Fprintln(tw, "MiB/s\tIOPS\tp50\tp99\tWAF\tdevice MiB\tGC MiB\tSQEs/enter\t")
	fmt.Fprintf(tw, "%.1f\t%.0f\t%v\t%v\t%s\t%.1f\t%.1f\t%s\t\n", s.MiBps, s.IOPS,
		r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond), ratioText(s.WAF, "%.3f"),
		float64(s.DevBytes)/(1<<20), float64(s.GCBytes)/(1<<20), ratioText(s.SQEsPerEnter, "%.1f"))
	if err := tw.Flush(); err != nil {
		return err
	}
	if (w.RW == "read" || w.RW == "randread") && r.Bytes > 0 {
		// A read run's untimed layout writes its files through the
		// cache, which is emptied before the timed reads unless
		// --warm-cache kept it: say which, and what the device served.
		from := fmt.Sprintf("read from the device: %s of %s (%.0f%%)",
			human(s.DevReadBytes), human(r.Bytes), 100*float64(s.DevReadBytes)/float64(r.Bytes))
		if w.WarmCache {
			fmt.Fprintf(out, "\n%s; the rest came from the cache, where the untimed layout left the files (--warm-cache)\n", from)
		} else {
			fmt.Fprintf(out, "\ncache emptied before the timed reads (as drop_caches; --warm-cache keeps it); %s\n", from)
		}
	}
	return nil
}
