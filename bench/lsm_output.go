package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
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
	charts := []struct {
		name string
		draw func([]*lsmRun, lsmWork) (*plot.Plot, error)
	}{
		{"waf", lsmWAFChart},
		{"ops", lsmOpsChart},
	}
	for _, c := range charts {
		p, err := c.draw(runs, w)
		if err != nil {
			return fmt.Errorf("chart %s: %w", c.name, err)
		}
		for _, ext := range []string{".png", ".svg"} {
			if err := p.Save(8*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, c.name+ext)); err != nil {
				return fmt.Errorf("chart %s: %w", c.name, err)
			}
		}
	}
	return nil
}

func (r *lsmRun) name() string { return fmt.Sprintf("%s #%d", r.Config, r.Round) }

var lsmSeriesColumns = []string{"seconds", "ops", "file_bytes", "dev_bytes", "gc_bytes", "zones_reset"}

// lsmSeriesRecords lays the overwrite phases' samples side by side, one
// column set per run.
func lsmSeriesRecords(runs []*lsmRun) [][]string {
	var head []string
	rows := 0
	for _, r := range runs {
		for _, c := range lsmSeriesColumns {
			head = append(head, r.name()+" "+c)
		}
		rows = max(rows, len(r.samples))
	}
	out := [][]string{head}
	for i := range rows {
		var row []string
		for _, r := range runs {
			if i >= len(r.samples) {
				row = append(row, make([]string, len(lsmSeriesColumns))...)
				continue
			}
			s := r.samples[i]
			row = append(row, strconv.FormatFloat(s.Seconds, 'f', 3, 64), strconv.FormatInt(s.Ops, 10), strconv.FormatInt(s.Host, 10),
				strconv.FormatInt(s.Dev, 10), strconv.FormatInt(s.GC, 10), strconv.FormatInt(s.Resets, 10))
		}
		out = append(out, row)
	}
	return out
}

// lsmLines draws one line per run that has points, with room above them
// for the legend.
func lsmLines(p *plot.Plot, runs []*lsmRun, points func(*lsmRun) plotter.XYs) error {
	top := 0.0
	for i, r := range runs {
		pts := points(r)
		if len(pts) == 0 {
			continue
		}
		for _, pt := range pts {
			top = max(top, pt.Y)
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(r.name(), l)
	}
	p.Y.Min, p.Y.Max = 0, max(top*1.4, 1)
	return nil
}

// lsmWindowed is one point per sample over the window back to the last
// sample at least span before it in pos units.
func lsmWindowed(ss []lsmSample, pos func(lsmSample) float64, span float64, y func(from, to lsmSample) float64) plotter.XYs {
	var pts plotter.XYs
	j := 0
	for i := 1; i < len(ss); i++ {
		for j+1 < i && pos(ss[i])-pos(ss[j+1]) >= span {
			j++
		}
		if pos(ss[i])-pos(ss[j]) < span && i != len(ss)-1 {
			continue
		}
		if v := y(ss[j], ss[i]); v >= 0 {
			pts = append(pts, plotter.XY{X: pos(ss[i]), Y: v})
		}
	}
	return pts
}

func lsmWAFChart(runs []*lsmRun, w lsmWork) (*plot.Plot, error) {
	p := newChart(fmt.Sprintf("Device WAF while overwriting (each point: the last %.2g device capacities of Pebble's writes)", lsmWAFWindow),
		"Pebble's file writes (device capacities)", "device bytes / Pebble's bytes")
	capacity := float64(max(w.capacity, 1))
	pos := func(s lsmSample) float64 { return float64(s.Host) / capacity }
	err := lsmLines(p, runs, func(r *lsmRun) plotter.XYs {
		if r.Config == lsmKernel {
			return nil
		}
		return lsmWindowed(r.samples, pos, lsmWAFWindow, func(from, to lsmSample) float64 {
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
	err := lsmLines(p, runs, func(r *lsmRun) plotter.XYs {
		return lsmWindowed(r.samples, pos, 1, func(from, to lsmSample) float64 {
			if to.Seconds <= from.Seconds {
				return -1
			}
			return float64(to.Ops-from.Ops) / (to.Seconds - from.Seconds)
		})
	})
	return p, err
}
