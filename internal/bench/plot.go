package bench

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Colours of the systems in the plot.
var (
	ferryColor = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	plainColor = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
)

// cdfPoints is the latency CDF of samples, at most n points, latencies in
// milliseconds (at least 0.1, so a log axis can take them).
func cdfPoints(samples []time.Duration, n int) plotter.XYs {
	if len(samples) == 0 {
		return nil
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	n = min(n, len(s))
	pts := make(plotter.XYs, 0, n+1)
	for i := range n {
		rank := int(math.Ceil(float64(i+1) / float64(n) * float64(len(s))))
		ms := math.Max(0.1, float64(s[rank-1])/float64(time.Millisecond))
		pts = append(pts, plotter.XY{X: ms, Y: float64(rank) / float64(len(s))})
	}
	return pts
}

// WritePlot draws one latency CDF per workload, Ferry and the plain relay
// together, the samples of all reps pooled, as a PNG.
func (res *Results) WritePlot(path string) error {
	var panels []*plot.Plot
	for _, ws := range res.Workloads {
		p := plot.New()
		p.Title.Text = ws.Name
		p.X.Label.Text = "commit → received (ms, log scale)"
		p.Y.Label.Text = "fraction of events"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Y.Min, p.Y.Max = 0, 1
		p.Add(plotter.NewGrid())
		p.Legend.Top = false
		p.Legend.Left = false
		drawn := false
		for _, sys := range []struct {
			name string
			c    color.Color
		}{{SystemFerry, ferryColor}, {SystemPlain, plainColor}} {
			var all []time.Duration
			for _, r := range res.Runs {
				if r.Workload == ws.Name && r.System == sys.name {
					all = append(all, r.latencies...)
				}
			}
			pts := cdfPoints(all, 400)
			if len(pts) == 0 {
				continue
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return fmt.Errorf("plot %s/%s: %w", ws.Name, sys.name, err)
			}
			l.Color = sys.c
			l.Width = vg.Points(1.5)
			p.Add(l)
			s := ws.system(sys.name)
			p.Legend.Add(fmt.Sprintf("%s  p50 %s  p99 %s", sys.name, dur(s.Latency.P50), dur(s.Latency.P99)), l)
			drawn = true
		}
		if drawn {
			panels = append(panels, p)
		}
	}
	if len(panels) == 0 {
		return nil
	}
	const cols = 2
	rows := (len(panels) + cols - 1) / cols
	grid := make([][]*plot.Plot, rows)
	for i := range grid {
		grid[i] = make([]*plot.Plot, cols)
	}
	for i, p := range panels {
		grid[i/cols][i%cols] = p
	}
	width, height := 12*vg.Inch, vg.Length(rows)*3.6*vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(96))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(grid, tiles, dc)
	for i := range rows {
		for j := range cols {
			if grid[i][j] != nil {
				grid[i][j].Draw(canvases[i][j])
			}
		}
	}
	return savePNG(img, path)
}

func savePNG(img *vgimg.Canvas, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}
