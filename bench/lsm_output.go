package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
)

// lsmWAFWindow is the span of Pebble's file writes, in device
// capacities, each point of the WAF chart covers.
const lsmWAFWindow = 0.25

// writeLSMOutputs writes summary.json, series.csv and the charts into
// dir: device WAF and ops/s over the overwrite phase, one line per run.
func writeLSMOutputs(dir string, sum lsmSummary, runs []*lsmRun, w lsmWork) error {
	if err := writeFileWith(filepath.Join(dir, "summary.json"), func(f *os.File) error { return WriteJSON(f, sum) }); err != nil {
		return err
	}
	if err := writeCSV(filepath.Join(dir, "series.csv"), lsmSeriesRecords(runs)); err != nil {
		return err
	}
	for _, c := range []struct {
		name string
		draw func([]*lsmRun, lsmWork) (*plot.Plot, error)
	}{{"waf", lsmWAFChart}, {"ops", lsmOpsChart}} {
		if err := saveChart(dir, c.name, func() (*plot.Plot, error) { return c.draw(runs, w) }); err != nil {
			return err
		}
	}
	return nil
}

func (r *lsmRun) name() string { return fmt.Sprintf("%s #%d", r.Config, r.Round) }

var lsmSeriesColumns = []string{"seconds", "ops", "file_bytes", "dev_bytes", "gc_bytes", "zones_reset", "live_bytes", "pebble_bytes", "jobs"}

// lsmSeriesRecords lays the overwrite phases' samples side by side, one
// column set per run.
func lsmSeriesRecords(runs []*lsmRun) [][]string {
	return sideBySide(runs, lsmSeriesColumns, func(r *lsmRun) int { return len(r.samples) }, func(r *lsmRun, i int) []string {
		s := r.samples[i]
		return []string{strconv.FormatFloat(s.Seconds, 'f', 3, 64), strconv.FormatInt(s.Ops, 10), strconv.FormatInt(s.Host, 10),
			strconv.FormatInt(s.Dev, 10), strconv.FormatInt(s.GC, 10), strconv.FormatInt(s.Resets, 10), strconv.FormatInt(s.Live, 10), strconv.FormatInt(s.Pebble, 10), strconv.Itoa(s.Jobs)}
	})
}

func lsmWAFChart(runs []*lsmRun, w lsmWork) (*plot.Plot, error) {
	p := newChart(fmt.Sprintf("Device WAF while overwriting (each point: the last %.2g device capacities of Pebble's writes)", lsmWAFWindow),
		"Pebble's file writes (device capacities)", "device bytes / Pebble's bytes")
	capacity := float64(max(w.capacity, 1))
	pos := func(s lsmSample) float64 { return float64(s.Host) / capacity }
	_, err := addSeries(p, runs, func(r *lsmRun) plotter.XYs {
		if r.Config == lsmKernel {
			return nil
		}
		return windowed(r.samples, pos, lsmWAFWindow, func(_, to lsmSample) float64 { return pos(to) }, func(from, to lsmSample) float64 {
			if to.Host == from.Host {
				return -1
			}
			return float64(to.Dev-from.Dev) / float64(to.Host-from.Host)
		})
	})
	return p, err
}

func lsmOpsChart(runs []*lsmRun, _ lsmWork) (*plot.Plot, error) {
	p := newChart("Pebble overwrites per second (each point: the last second)", "time since the overwrites began (s)", "ops/s")
	pos := func(s lsmSample) float64 { return s.Seconds }
	_, err := addSeries(p, runs, func(r *lsmRun) plotter.XYs {
		return windowed(r.samples, pos, 1, func(_, to lsmSample) float64 { return pos(to) }, func(from, to lsmSample) float64 {
			if to.Seconds <= from.Seconds {
				return -1
			}
			return float64(to.Ops-from.Ops) / (to.Seconds - from.Seconds)
		})
	})
	return p, err
}
