package bench

import (
	"cmp"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
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
	wafWindow = 0.25
	// mbpsWindow is the span of time each point of the throughput chart
	// covers.
	mbpsWindow = 0.5 // seconds
	// histBins splits a zone's valid fraction into tenths.
	histBins = 10
)

// shownRun is the run a row's charts draw: the one whose WAF is the
// median (the lower middle one for an even count).
func (r *gcRow) shownRun() *gcRun {
	runs := slices.Clone(r.Runs)
	slices.SortFunc(runs, func(a, b *gcRun) int { return cmp.Compare(a.WAF, b.WAF) })
	return runs[(len(runs)-1)/2]
}

// chartLine is one configuration's line in a chart.
type chartLine struct {
	label string
	run   *gcRun
}

func (l chartLine) name() string { return l.label }

func chartLines(ws *gcWorkloadSummary) []chartLine {
	var out []chartLine
	for _, r := range ws.Rows {
		if len(r.Runs) > 0 {
			out = append(out, chartLine{r.name(), r.shownRun()})
		}
	}
	return out
}

// writeGCOutputs writes summary.json and, per workload, series and zones
// CSV and the charts into dir.
func writeGCOutputs(dir string, sum gcSummary) error {
	if err := writeFileWith(filepath.Join(dir, "summary.json"), func(f *os.File) error { return WriteJSON(f, sum) }); err != nil {
		return err
	}
	for _, ws := range sum.workloads {
		lines := chartLines(ws)
		w := ws.Workload
		if err := writeCSV(filepath.Join(dir, "series-"+w+".csv"), seriesRecords(lines)); err != nil {
			return err
		}
		if err := writeCSV(filepath.Join(dir, "zones-"+w+".csv"), zoneRecords(lines)); err != nil {
			return err
		}
		charts := []struct {
			name string
			draw func(*gcWorkloadSummary, []chartLine) (*plot.Plot, error)
		}{
			{"waf", wafChart},
			{"throughput", throughputChart},
			{"valid-histogram", validHistogram},
		}
		for _, c := range charts {
			if err := saveChart(dir, c.name+"-"+w, func() (*plot.Plot, error) { return c.draw(ws, lines) }); err != nil {
				return err
			}
		}
	}
	return nil
}

// saveChart draws a chart and saves it in dir as name.png and name.svg.
func saveChart(dir, name string, draw func() (*plot.Plot, error)) error {
	p, err := draw()
	if err != nil {
		return fmt.Errorf("chart %s: %w", name, err)
	}
	for _, ext := range []string{".png", ".svg"} {
		if err := p.Save(8*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, name+ext)); err != nil {
			return fmt.Errorf("chart %s: %w", name, err)
		}
	}
	return nil
}

// seriesColumns are the columns each configuration has in series.csv.
var seriesColumns = []string{"seconds", "host_bytes", "dev_bytes", "gc_bytes", "zones_reset", "header_bytes", "pad_bytes", "meta_bytes"}

// seriesRecords lays the samples out side by side: one column set per
// configuration, one row per sample.
func seriesRecords(lines []chartLine) [][]string {
	return sideBySide(lines, seriesColumns, func(l chartLine) int { return len(l.run.samples) }, func(l chartLine, i int) []string {
		s := l.run.samples[i]
		return []string{strconv.FormatFloat(s.Seconds, 'f', 3, 64), strconv.FormatInt(s.Host, 10),
			strconv.FormatInt(s.Dev, 10), strconv.FormatInt(s.GC, 10), strconv.FormatInt(s.Resets, 10),
			strconv.FormatInt(s.Headers, 10), strconv.FormatInt(s.Pad, 10), strconv.FormatInt(s.Meta, 10)}
	})
}

// sideBySide lays runs' rows out side by side: one set of columns per
// run, headed "name column"; a run with fewer rows leaves its cells
// empty.
func sideBySide[R interface{ name() string }](runs []R, columns []string, rowsOf func(R) int, row func(R, int) []string) [][]string {
	var head []string
	rows := 0
	for _, r := range runs {
		for _, c := range columns {
			head = append(head, r.name()+" "+c)
		}
		rows = max(rows, rowsOf(r))
	}
	out := [][]string{head}
	for i := range rows {
		var line []string
		for _, r := range runs {
			if i >= rowsOf(r) {
				line = append(line, make([]string, len(columns))...)
				continue
			}
			line = append(line, row(r, i)...)
		}
		out = append(out, line)
	}
	return out
}

// zoneRecords is every data zone's valid bytes and state at the end, per
// configuration.
func zoneRecords(lines []chartLine) [][]string {
	head := []string{"zone", "cap"}
	for _, l := range lines {
		head = append(head, l.label+" valid", l.label+" state")
	}
	out := [][]string{head}
	if len(lines) == 0 {
		return out
	}
	for i, z := range lines[0].run.zones {
		row := []string{strconv.Itoa(z.Zone), strconv.FormatInt(z.Cap, 10)}
		for _, l := range lines {
			if i < len(l.run.zones) {
				row = append(row, strconv.FormatInt(l.run.zones[i].Valid, 10), l.run.zones[i].State)
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

// addSeries draws one line per run (a configuration, or one round of
// one), from 0 up, with room above the lines for the legend; a run with
// no points gets none.
func addSeries[R interface{ name() string }](p *plot.Plot, runs []R, points func(R) plotter.XYs) (top float64, err error) {
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
			return top, err
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(r.name(), l)
	}
	return top, nil
}

// windowed makes one point per sample: x of the sample, and y over the
// span back to the last sample at least span before it in pos units.
func windowed[S any](ss []S, pos func(S) float64, span float64, x, y func(from, to S) float64) plotter.XYs {
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

func wafChart(ws *gcWorkloadSummary, lines []chartLine) (*plot.Plot, error) {
	p := newChart(fmt.Sprintf("%s: write amplification (each point: the last %.2g device capacities written)", ws.Workload, wafWindow),
		"host writes since the fill (device capacities)", "WAF (device bytes / host bytes)")
	capacity := float64(ws.Capacity)
	pos := func(s sample) float64 { return float64(s.Host) / capacity }
	top, err := addSeries(p, lines, func(l chartLine) plotter.XYs {
		r := l.run
		return windowed(r.samples, pos, wafWindow,
			func(_, to sample) float64 { return pos(to) },
			func(from, to sample) float64 {
				if to.Host == from.Host {
					return -1
				}
				return float64(to.Dev-from.Dev) / float64(to.Host-from.Host)
			})
	})
	if err != nil || ws.RefWAF <= 0 {
		return p, err
	}
	// The reference line spans the chart's x range.
	xmax := 0.0
	for _, l := range lines {
		if n := len(l.run.samples); n > 0 {
			xmax = max(xmax, pos(l.run.samples[n-1]))
		}
	}
	ref, err := plotter.NewLine(plotter.XYs{{X: 0, Y: ws.RefWAF}, {X: max(xmax, 0.1), Y: ws.RefWAF}})
	if err != nil {
		return p, err
	}
	ref.Color = color.Gray{Y: 96}
	ref.Dashes = []vg.Length{vg.Points(2), vg.Points(3)}
	ref.Width = vg.Points(1)
	p.Add(ref)
	label := fmt.Sprintf("reference %.2f", ws.RefWAF)
	if ws.Workload == WorkUniform {
		label = fmt.Sprintf("analytic greedy %.2f", ws.RefWAF)
	}
	p.Legend.Add(label, ref)
	p.Y.Max = max(p.Y.Max, top*1.4, ws.RefWAF*1.4)
	return p, nil
}

func throughputChart(ws *gcWorkloadSummary, lines []chartLine) (*plot.Plot, error) {
	p := newChart(fmt.Sprintf("%s: host throughput (each point: the last %gs)", ws.Workload, mbpsWindow),
		"time since the fill (s)", "host MiB/s")
	pos := func(s sample) float64 { return s.Seconds }
	_, err := addSeries(p, lines, func(l chartLine) plotter.XYs {
		r := l.run
		ss := r.samples
		if n := len(ss); n > 1 {
			ss = ss[:n-1] // the last is after the untimed final writeback
		}
		return windowed(ss, pos, mbpsWindow,
			func(_, to sample) float64 { return to.Seconds },
			func(from, to sample) float64 {
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
func validHistogram(ws *gcWorkloadSummary, lines []chartLine) (*plot.Plot, error) {
	p := newChart(ws.Workload+": valid data per zone at the end (zones holding data)", "valid fraction of the zone", "zones")
	labels := make([]string, histBins)
	for b := range histBins {
		labels[b] = fmt.Sprintf("%d-%d%%", b*100/histBins, (b+1)*100/histBins)
	}
	width := vg.Points(36 / float64(max(1, len(lines))))
	top := 0.0
	for i, l := range lines {
		r := l.run
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
		bars.Offset = width * vg.Length(float64(i)-float64(len(lines)-1)/2)
		p.Add(bars)
		p.Legend.Add(fmt.Sprintf("%s (%d free)", l.label, free), bars)
	}
	p.Legend.Left = true
	p.Y.Min, p.Y.Max = 0, max(top*1.4, 1) // room above the bars for the legend
	p.NominalX(labels...)
	p.X.Tick.Label.Rotation = 0
	p.X.Tick.Label.XAlign = draw.XCenter
	return p, nil
}
