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
	"gonum.org/v1/plot/vg/draw"
)

// The charts are drawn with gonum.org/v1/plot: one library gives lines,
// grouped bars, legends and both PNG and SVG output, where drawing them by
// hand would be a small renderer of its own.

const (
	// wafWindow is the span of host writes, in device capacities, each
	// point of the WAF chart covers: short enough to show GC starting,
	// long enough to smooth over single GC passes.
	wafWindow = 0.5
	// mbpsWindow is the span of time each point of the throughput chart
	// covers.
	mbpsWindow = 1.0 // seconds
	// histBins splits a zone's valid fraction into tenths.
	histBins = 10
)

// writeGCOutputs writes summary.json, series.csv, zones.csv and the charts
// into dir.
func writeGCOutputs(dir string, sum gcSummary, runs []*gcRun, w gcWorkload) error {
	if err := writeFileWith(filepath.Join(dir, "summary.json"), func(f *os.File) error { return WriteJSON(f, sum) }); err != nil {
		return err
	}
	if err := writeCSV(filepath.Join(dir, "series.csv"), seriesRecords(runs)); err != nil {
		return err
	}
	if err := writeCSV(filepath.Join(dir, "zones.csv"), zoneRecords(runs)); err != nil {
		return err
	}
	charts := []struct {
		name string
		draw func([]*gcRun, gcWorkload) (*plot.Plot, error)
	}{
		{"waf", wafChart},
		{"throughput", throughputChart},
		{"valid-histogram", validHistogram},
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

// seriesColumns are the columns each configuration has in series.csv.
var seriesColumns = []string{"seconds", "host_bytes", "dev_bytes", "gc_bytes", "zones_reset"}

// seriesRecords lays the samples out side by side: one column set per
// configuration, one row per sample; a configuration with fewer samples
// leaves its cells empty.
func seriesRecords(runs []*gcRun) [][]string {
	var head []string
	rows := 0
	for _, r := range runs {
		for _, c := range seriesColumns {
			head = append(head, r.name()+" "+c)
		}
		rows = max(rows, len(r.samples))
	}
	out := [][]string{head}
	for i := range rows {
		var row []string
		for _, r := range runs {
			if i >= len(r.samples) {
				row = append(row, make([]string, len(seriesColumns))...)
				continue
			}
			s := r.samples[i]
			row = append(row, strconv.FormatFloat(s.Seconds, 'f', 3, 64), strconv.FormatInt(s.Host, 10),
				strconv.FormatInt(s.Dev, 10), strconv.FormatInt(s.GC, 10), strconv.FormatInt(s.Resets, 10))
		}
		out = append(out, row)
	}
	return out
}

// zoneRecords is every data zone's valid bytes and state at the end, per
// configuration.
func zoneRecords(runs []*gcRun) [][]string {
	head := []string{"zone", "cap"}
	for _, r := range runs {
		head = append(head, r.name()+" valid", r.name()+" state")
	}
	out := [][]string{head}
	if len(runs) == 0 {
		return out
	}
	for i, z := range runs[0].zones {
		row := []string{strconv.Itoa(z.Zone), strconv.FormatInt(z.Cap, 10)}
		for _, r := range runs {
			if i < len(r.zones) {
				row = append(row, strconv.FormatInt(r.zones[i].Valid, 10), r.zones[i].State)
			} else {
				row = append(row, "", "")
			}
		}
		out = append(out, row)
	}
	return out
}

// newChart is a plot with a title, axis labels and a legend at the top.
func newChart(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	return p
}

// addSeries draws one line per configuration, from 0 up, with room above
// the lines for the legend.
func addSeries(p *plot.Plot, runs []*gcRun, points func(*gcRun) plotter.XYs) error {
	top := 0.0
	defer func() { p.Y.Min, p.Y.Max = 0, max(top*1.4, 1) }()
	for i, r := range runs {
		pts := points(r)
		for _, pt := range pts {
			top = max(top, pt.Y)
		}
		if len(pts) == 0 {
			continue
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
	return nil
}

// windowed makes one point per sample: x of the sample, and y over the
// span back to the last sample at least span before it in pos units.
func windowed(ss []gcSample, pos func(gcSample) float64, span float64, x, y func(from, to gcSample) float64) plotter.XYs {
	var pts plotter.XYs
	j := 0
	for i := 1; i < len(ss); i++ {
		for j+1 < i && pos(ss[i])-pos(ss[j+1]) >= span {
			j++
		}
		if pos(ss[i])-pos(ss[j]) < span && i != len(ss)-1 {
			continue // not a full window yet
		}
		if v := y(ss[j], ss[i]); v >= 0 {
			pts = append(pts, plotter.XY{X: x(ss[j], ss[i]), Y: v})
		}
	}
	return pts
}

func wafChart(runs []*gcRun, w gcWorkload) (*plot.Plot, error) {
	p := newChart(fmt.Sprintf("Write amplification while overwriting (each point: the last %.2g device capacities)", wafWindow),
		"host writes (device capacities)", "WAF (device bytes / host bytes)")
	capacity := float64(w.capacity)
	pos := func(s gcSample) float64 { return float64(s.Host) / capacity }
	err := addSeries(p, runs, func(r *gcRun) plotter.XYs {
		return windowed(r.samples, pos, wafWindow,
			func(_, to gcSample) float64 { return pos(to) },
			func(from, to gcSample) float64 {
				if to.Host == from.Host {
					return -1
				}
				return float64(to.Dev-from.Dev) / float64(to.Host-from.Host)
			})
	})
	return p, err
}

func throughputChart(runs []*gcRun, _ gcWorkload) (*plot.Plot, error) {
	p := newChart(fmt.Sprintf("Host throughput while overwriting (each point: the last %gs)", mbpsWindow),
		"time since the overwrites began (s)", "host MiB/s")
	pos := func(s gcSample) float64 { return s.Seconds }
	err := addSeries(p, runs, func(r *gcRun) plotter.XYs {
		return windowed(r.samples, pos, mbpsWindow,
			func(_, to gcSample) float64 { return to.Seconds },
			func(from, to gcSample) float64 {
				if to.Seconds <= from.Seconds {
					return -1
				}
				return float64(to.Host-from.Host) / (to.Seconds - from.Seconds) / (1 << 20)
			})
	})
	return p, err
}

// validHistogram counts, per configuration, the zones holding data by the
// fraction of them still valid: the shape GC works with. Free zones are
// left out (they hold nothing); the legend gives their count.
func validHistogram(runs []*gcRun, _ gcWorkload) (*plot.Plot, error) {
	p := newChart("Valid data per zone at the end (zones holding data)", "valid fraction of the zone", "zones")
	labels := make([]string, histBins)
	for b := range histBins {
		labels[b] = fmt.Sprintf("%d-%d%%", b*100/histBins, (b+1)*100/histBins)
	}
	width := vg.Points(36 / float64(max(1, len(runs))))
	top := 0.0
	for i, r := range runs {
		counts := make(plotter.Values, histBins)
		free := 0
		for _, z := range r.zones {
			if z.State == "free" || z.Cap <= 0 {
				free++
				continue
			}
			b := min(histBins-1, int(float64(z.Valid)/float64(z.Cap)*histBins))
			counts[max(b, 0)]++
		}
		for _, c := range counts {
			top = max(top, c)
		}
		bars, err := plotter.NewBarChart(counts, width)
		if err != nil {
			return nil, err
		}
		bars.Color = plotutil.Color(i)
		bars.LineStyle.Width = 0
		bars.Offset = width * vg.Length(float64(i)-float64(len(runs)-1)/2)
		p.Add(bars)
		p.Legend.Add(fmt.Sprintf("%s (%d free)", r.name(), free), bars)
	}
	p.Legend.Left = true
	p.Y.Min, p.Y.Max = 0, max(top*1.4, 1) // room above the bars for the legend
	p.NominalX(labels...)
	p.X.Tick.Label.Rotation = 0
	p.X.Tick.Label.XAlign = draw.XCenter
	return p, nil
}
