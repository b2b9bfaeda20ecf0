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

	"github.com/zonefold/zonefold/internal/report"
)

// peerLine is the run a workload's charts draw for one target: its first
// finished round.
type peerLine struct {
	target string
	run    *PeerRun
}

func peerLines(pw *PeerWorkload) []peerLine {
	var out []peerLine
	for _, r := range pw.Rows {
		if runs := r.done(); len(runs) > 0 {
			out = append(out, peerLine{r.Target, runs[0]})
		}
	}
	return out
}

// writePeersOutputs writes summary.json, and per workload a series CSV
// and WAF and throughput charts (PNG and SVG), into dir.
func writePeersOutputs(dir string, sum *PeersSummary) error {
	if err := writeFileWith(filepath.Join(dir, "summary.json"), func(f *os.File) error { return WriteJSON(f, sum) }); err != nil {
		return err
	}
	for _, pw := range sum.Workloads {
		lines := peerLines(pw)
		if len(lines) == 0 {
			continue
		}
		if err := writeCSV(filepath.Join(dir, pw.Workload+"-series.csv"), peerSeriesRecords(lines)); err != nil {
			return err
		}
		for _, c := range []struct {
			name string
			draw func(*PeerWorkload, []peerLine) (*plot.Plot, error)
		}{{"waf", peerWAFChart}, {"throughput", peerThroughputChart}} {
			p, err := c.draw(pw, lines)
			if err != nil {
				return fmt.Errorf("chart %s %s: %w", pw.Workload, c.name, err)
			}
			for _, ext := range []string{".png", ".svg"} {
				if err := p.Save(8*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, pw.Workload+"-"+c.name+ext)); err != nil {
					return fmt.Errorf("chart %s %s: %w", pw.Workload, c.name, err)
				}
			}
		}
	}
	return nil
}

// peerSeriesRecords lays the targets' samples side by side, one column set
// per target (seconds, host, device, GC bytes since the writers started).
func peerSeriesRecords(lines []peerLine) [][]string {
	cols := []string{"seconds", "host_bytes", "dev_bytes", "gc_bytes"}
	var head []string
	rows := 0
	for _, l := range lines {
		for _, c := range cols {
			head = append(head, l.target+"_"+c)
		}
		rows = max(rows, len(l.run.samples))
	}
	out := [][]string{head}
	for i := range rows {
		var rec []string
		for _, l := range lines {
			if i >= len(l.run.samples) {
				rec = append(rec, make([]string, len(cols))...)
				continue
			}
			s := l.run.samples[i]
			gc := ""
			if l.run.GCBytes >= 0 {
				gc = strconv.FormatInt(s.GC, 10)
			}
			rec = append(rec, strconv.FormatFloat(s.Seconds, 'f', 3, 64), strconv.FormatInt(s.Host, 10),
				strconv.FormatInt(s.Dev, 10), gc)
		}
		out = append(out, rec)
	}
	return out
}

// peerChartLines draws one line per target from its points, from 0 up with
// room above for the legend.
func peerChartLines(p *plot.Plot, lines []peerLine, points func(peerLine) plotter.XYs) error {
	top := 0.0
	for i, l := range lines {
		pts := points(l)
		if len(pts) == 0 {
			continue
		}
		for _, pt := range pts {
			top = max(top, pt.Y)
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		line.Color = plotutil.Color(i)
		line.Dashes = plotutil.Dashes(i)
		line.Width = vg.Points(1.5)
		p.Add(line)
		p.Legend.Add(l.target, line)
	}
	p.Y.Min, p.Y.Max = 0, max(top*1.4, 1)
	return nil
}

// peerWAFChart draws each target's WAF against its host writes, in its
// own capacities (the targets' capacities differ).
func peerWAFChart(pw *PeerWorkload, lines []peerLine) (*plot.Plot, error) {
	p := newChart(fmt.Sprintf("%s: write amplification from the device counter (each point: the last %.2g capacities)", pw.Workload, wafWindow),
		"host writes (the target's capacities)", "WAF (device bytes / host bytes)")
	err := peerChartLines(p, lines, func(l peerLine) plotter.XYs {
		c := float64(l.run.Capacity)
		pos := func(s sample) float64 { return float64(s.Host) / c }
		return windowed(l.run.samples, pos, wafWindow, func(_, to sample) float64 { return pos(to) },
			func(from, to sample) float64 {
				if to.Host == from.Host {
					return -1
				}
				return float64(to.Dev-from.Dev) / float64(to.Host-from.Host)
			})
	})
	return p, err
}

func peerThroughputChart(pw *PeerWorkload, lines []peerLine) (*plot.Plot, error) {
	p := newChart(fmt.Sprintf("%s: host throughput (each point: the last %gs)", pw.Workload, mbpsWindow),
		"time since the writers started (s)", "host "+report.RateUnit)
	err := peerChartLines(p, lines, func(l peerLine) plotter.XYs {
		pos := func(s sample) float64 { return s.Seconds }
		return windowed(l.run.samples, pos, mbpsWindow, func(_, to sample) float64 { return to.Seconds },
			func(from, to sample) float64 {
				if to.Seconds <= from.Seconds {
					return -1
				}
				return float64(to.Host-from.Host) / (to.Seconds - from.Seconds) / (1 << 20)
			})
	})
	return p, err
}
