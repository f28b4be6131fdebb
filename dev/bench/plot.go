package bench

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Colours of the systems in the plot.
var (
	ferryColor    = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	ferryWALColor = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	laneColor     = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
	laneWALColor  = color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}
	plainColor    = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
)

// durationTicks labels a log axis of milliseconds with units (1ms, 10ms,
// 100ms, 1s, 10s…), and also 2 and 5 of each decade when the axis spans
// less than two decades.
type durationTicks struct{}

func (durationTicks) Ticks(lo, hi float64) []plot.Tick {
	narrow := hi/lo < 100
	var ticks []plot.Tick
	for decade := math.Pow(10, math.Floor(math.Log10(lo))); decade <= hi; decade *= 10 {
		for m := 1.0; m < 10; m++ {
			v := decade * m
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || (narrow && (m == 2 || m == 5)) {
				t.Label = msLabel(v)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// msLabel writes a round number of milliseconds briefly: 0.1ms, 20ms, 5s.
func msLabel(ms float64) string {
	switch {
	case ms >= 60_000:
		return fmt.Sprintf("%gmin", ms/60_000)
	case ms >= 1000:
		return fmt.Sprintf("%gs", ms/1000)
	}
	return fmt.Sprintf("%gms", ms)
}

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

// WritePlot draws one latency CDF per workload, Ferry (each lane and
// source) and the plain relay together, the samples of all reps pooled, as a PNG.
func (res *Results) WritePlot(path string) error {
	var panels []*plot.Plot
	for _, ws := range res.Workloads {
		p := plot.New()
		p.Title.Text = ws.Name
		p.X.Label.Text = "commit → received (log scale)"
		p.Y.Label.Text = "fraction of events"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = durationTicks{}
		p.Y.Min, p.Y.Max = 0, 1
		p.Add(plotter.NewGrid())
		// A CDF never reaches the top left corner: the legend goes there.
		p.Legend.Top = true
		p.Legend.Left = true
		p.Legend.XOffs, p.Legend.YOffs = vg.Millimeter*2, -vg.Millimeter*2
		var figures []string
		drawn := false
		for _, sys := range []struct {
			name string
			c    color.Color
		}{{SystemFerry, ferryColor}, {variantFerryWAL, ferryWALColor}, {SystemLane, laneColor}, {variantLaneWAL, laneWALColor}, {SystemPlain, plainColor}} {
			var all []time.Duration
			for _, r := range res.Runs {
				if r.Workload == ws.Name && r.variant() == sys.name {
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
			s, name := ws.system(sys.name), ws.label(sys.name)
			p.Legend.Add(name, l)
			figures = append(figures, fmt.Sprintf("%s p50 %s, p99 %s", name, dur(s.Latency.P50), dur(s.Latency.P99)))
			drawn = true
		}
		if drawn {
			p.Title.Text += "\n" + strings.Join(figures, " · ")
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
