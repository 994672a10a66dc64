package mqttbench

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// ChartFormats are the file extensions WriteChart accepts.
var ChartFormats = []string{".svg", ".png"}

// WriteChart draws the window curves, one panel per QoS with one line per
// target (msgs/s against the window, both on log scales), to path; the
// extension picks SVG or PNG.
func (rep *Report) WriteChart(path string) (err error) {
	ext := strings.ToLower(filepath.Ext(path))
	if !slices.Contains(ChartFormats, ext) {
		return fmt.Errorf("chart %q: the file name must end in %s", path, strings.Join(ChartFormats, " or "))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := rep.drawChart(f, ext); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (rep *Report) drawChart(w io.Writer, ext string) (err error) {
	// The plotting library panics on values its scales cannot show; the
	// curves hold only positive figures, but a chart is not worth a crash.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("chart: %v", r)
		}
	}()
	byQoS := map[byte][]Curve{}
	var qs []byte
	for _, c := range rep.Curves() {
		if _, ok := byQoS[c.QoS]; !ok {
			qs = append(qs, c.QoS)
		}
		byQoS[c.QoS] = append(byQoS[c.QoS], c)
	}
	if len(qs) == 0 {
		return errors.New("chart: no single-connection point completed")
	}
	slices.Sort(qs)
	var row []*plot.Plot
	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	legend.TextStyle.Font.Size = vg.Points(9)
	inLegend := map[string]bool{}
	for _, q := range qs {
		p, err := curvePlot(q, byQoS[q], rep.targetOrder(), func(name string, th ...plot.Thumbnailer) {
			if !inLegend[name] {
				inLegend[name] = true
				legend.Add(name, th...)
			}
		})
		if err != nil {
			return err
		}
		row = append(row, p)
	}
	const legendWidth = 190
	width, height := vg.Points(float64(360*len(row)+legendWidth)), vg.Points(430)
	var canvas vg.CanvasWriterTo
	switch ext {
	case ".svg":
		canvas = vgsvg.New(width, height)
	default:
		canvas = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(110))}
	}
	dc := draw.New(canvas)
	tiles := draw.Tiles{Rows: 1, Cols: len(row), PadX: vg.Millimeter * 4, PadTop: vg.Millimeter * 2,
		PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	cells := plot.Align([][]*plot.Plot{row}, tiles, draw.Crop(dc, 0, -vg.Points(legendWidth), 0, 0))
	for i, p := range row {
		p.Draw(cells[0][i])
	}
	legend.Draw(draw.Crop(dc, width-vg.Points(legendWidth), 0, 0, -vg.Millimeter*8))
	_, err = canvas.WriteTo(w)
	return err
}

// targetOrder gives each target a stable index, so it keeps its colour
// and marker in every panel.
func (rep *Report) targetOrder() map[string]int {
	m := map[string]int{}
	for _, t := range rep.Targets {
		if _, ok := m[t.Label()]; !ok {
			m[t.Label()] = len(m)
		}
	}
	return m
}

func curvePlot(qos byte, curves []Curve, order map[string]int, addLegend func(string, ...plot.Thumbnailer)) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("QoS %d, one connection (log scales)", qos)
	p.X.Label.Text = "window (unacknowledged PUBLISHes)"
	p.Y.Label.Text = "msgs/s"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.Y.Tick.Marker = decadeTicks{}
	var windows []int
	for _, c := range curves {
		for _, w := range c.Window {
			if !slices.Contains(windows, w) {
				windows = append(windows, w)
			}
		}
	}
	slices.Sort(windows)
	var ticks []plot.Tick
	for _, w := range windows {
		ticks = append(ticks, plot.Tick{Value: float64(w), Label: strconv.Itoa(w)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.Add(plotter.NewGrid())
	for _, c := range curves {
		pts := make(plotter.XYs, len(c.Window))
		for i := range c.Window {
			pts[i].X, pts[i].Y = float64(c.Window[i]), c.PerSec[i]
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, err
		}
		i := order[c.Target]
		line.Color = plotutil.Color(i)
		line.Width = vg.Points(1.5)
		line.Dashes = plotutil.Dashes(i / len(plotutil.DefaultColors))
		points.Color = line.Color
		points.Shape = plotutil.Shape(i)
		p.Add(line, points)
		addLegend(c.Target, line, points)
	}
	return p, nil
}

// decadeTicks labels 1, 2 and 5 times each power of ten on a log axis.
type decadeTicks struct{}

func (decadeTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	if lo <= 0 || hi <= lo {
		return ticks
	}
	for d := math.Pow10(int(math.Floor(math.Log10(lo)))); d <= hi; d *= 10 {
		for m := 1; m < 10; m++ {
			v := d * float64(m)
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = strconv.FormatFloat(v, 'f', -1, 64)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}
