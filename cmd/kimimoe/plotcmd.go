package main

import (
	"encoding/json"
	"fmt"
	"image/color"
	"os"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// benchDoc is what `bench --json` writes (the fields plot needs).
type benchDoc struct {
	Backend string     `json:"backend"`
	Device  string     `json:"device"`
	Date    string     `json:"date"`
	K       int        `json:"k,omitempty"` // absent in files from before bench --k: Kimi's
	N       int        `json:"n,omitempty"`
	Timing  string     `json:"timing,omitempty"` // how bench timed (absent in files written before the field: docs/PERF.md says)
	Rows    []benchRow `json:"rows"`
}

// peerDoc is what the peer script writes: per M, its best CUDA-graph time.
type peerDoc struct {
	DateUTC string `json:"date_utc"`
	Device  string `json:"device"`
	Timing  string `json:"timing"`
	Rows    []struct {
		M       int     `json:"M"`
		GraphMS float64 `json:"triton_graph_ms"`
	} `json:"rows"`
}

// runPlot draws a bench JSON (and a peer's) as latency against M.
func runPlot(args []string) error {
	fs := newFlags("plot", "--bench bench.json [--peers peer_triton.json] --out FILE.svg")
	benchPath := fs.String("bench", "", "JSON written by kimimoe bench --json")
	peersPath := fs.String("peers", "", "JSON written by the peer script (peer_triton.json), optional")
	out := fs.String("out", "", "the plot to write (.svg, .png or .pdf)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *benchPath == "" || *out == "" {
		return usagef("--bench and --out are required")
	}
	var doc benchDoc
	if err := readJSON(*benchPath, &doc); err != nil {
		return asUsage(err)
	}
	var peers *peerDoc
	if *peersPath != "" {
		peers = &peerDoc{}
		if err := readJSON(*peersPath, peers); err != nil {
			return asUsage(err)
		}
	}
	return writePlot(*out, &doc, peers)
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// palette: kimimoe, the floor, the peer.
var palette = []color.Color{color.RGBA{31, 119, 180, 255}, color.RGBA{110, 110, 110, 255}, color.RGBA{214, 39, 40, 255}}

// writePlot draws median latency and the floor (and the peer) against M,
// both axes logarithmic.
func writePlot(path string, doc *benchDoc, peers *peerDoc) error {
	if len(doc.Rows) == 0 {
		return usagef("the bench JSON has no rows")
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("kimimoe %s on %s, %.10s", doc.Backend, doc.Device, doc.Date)
	p.X.Label.Text = "tokens M"
	p.Y.Label.Text = "ms per forward (CUDA graph)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	p.Legend.Top, p.Legend.Left = true, true
	series := func(name string, xy plotter.XYs, dashed bool, shape int) error {
		sort.Slice(xy, func(i, j int) bool { return xy[i].X < xy[j].X })
		l, s, err := plotter.NewLinePoints(xy)
		if err != nil {
			return err
		}
		l.Color = palette[shape%len(palette)]
		s.Color = l.Color
		if dashed {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(l, s)
		p.Legend.Add(name, l, s)
		return nil
	}
	var kimi, floor plotter.XYs
	for _, r := range doc.Rows {
		kimi = append(kimi, plotter.XY{X: float64(r.M), Y: r.MedianMS})
		floor = append(floor, plotter.XY{X: float64(r.M), Y: r.FloorMS})
	}
	if err := series("kimimoe (median)", kimi, false, 0); err != nil {
		return err
	}
	if err := series("floor: max(bytes/bandwidth, FLOPs/FP8 peak)", floor, true, 1); err != nil {
		return err
	}
	if peers != nil {
		var xy plotter.XYs
		for _, r := range peers.Rows {
			if r.GraphMS > 0 {
				xy = append(xy, plotter.XY{X: float64(r.M), Y: r.GraphMS})
			}
		}
		if len(xy) > 0 {
			if err := series("Triton peer (best variant, CUDA graph)", xy, false, 2); err != nil {
				return err
			}
		}
	}
	return p.Save(16*vg.Centimeter, 11*vg.Centimeter, path)
}
