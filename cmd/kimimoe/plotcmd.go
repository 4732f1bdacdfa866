package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"image/color"
	"path/filepath"
	"sort"
	"strings"

	"kimimoe/internal/regular"
	"kimimoe/moe"

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
	Shape   string     `json:"shape,omitempty"`  // the benched layer (absent before bench --shape: Kimi EP32 rank 7)
	Chain   string     `json:"chain,omitempty"`
	Rows    []benchRow `json:"rows"`
}

// peerDoc is what a peer script writes: per M, its best CUDA-graph time.
// bench/peer_moe.py writes date_utc and triton_graph_ms,
// bench/peer_triton_kernels.py date and graph_ms; both write peer.
type peerDoc struct {
	Peer    string `json:"peer"`
	DateUTC string `json:"date_utc"`
	Date    string `json:"date"`
	Device  string `json:"device"`
	Timing  any    `json:"timing"` // a string, or the triton_kernels script's object of notes
	// Workload is the layer the peer ran: triton_kernels' script writes
	// K_hidden and N_intermediate, the Triton MX MoE's K and N; absent in
	// older files, whose peers ran the Kimi shape.
	Workload struct {
		K      int `json:"K_hidden"`
		N      int `json:"N_intermediate"`
		KShort int `json:"K"`
		NShort int `json:"N"`
	} `json:"workload"`
	Rows []struct {
		M       int     `json:"M"` // JSON keys match case-insensitively: "m" too
		GraphMS float64 `json:"triton_graph_ms"`
		Graph2  float64 `json:"graph_ms"`
	} `json:"rows"`
}

// shape is the peer's K and N (Kimi's where its file does not say).
func (d *peerDoc) shape() (k, n int) {
	w, kimi := d.Workload, moe.KimiK3()
	k, n = cmp.Or(w.K, w.KShort, kimi.K), cmp.Or(w.N, w.NShort, kimi.N)
	return k, n
}

// when is the peer's date.
func (d *peerDoc) when() string {
	if d.DateUTC != "" {
		return d.DateUTC
	}
	return d.Date
}

// name is the peer's label in tables and plots.
func (d *peerDoc) name() string {
	if d.Peer != "" {
		return d.Peer
	}
	return "Triton peer"
}

// ms is row i's CUDA-graph time (0: none).
func (d *peerDoc) ms(i int) float64 {
	if r := d.Rows[i]; r.GraphMS > 0 {
		return r.GraphMS
	}
	return d.Rows[i].Graph2
}

// timing is how the peer timed, up to its notes.
func (d *peerDoc) timing() string {
	switch t := d.Timing.(type) {
	case string:
		return strings.SplitN(t, ";", 2)[0]
	case map[string]any:
		if g, ok := t["graph_ms"].(string); ok {
			return strings.SplitN(g, ";", 2)[0]
		}
	}
	return ""
}

// peerPaths splits a --peers list into its files.
func peerPaths(list string) []string { return inputsOf(strings.Split(list, ",")...) }

// readPeers reads a comma-separated list of peer JSONs.
func readPeers(list string) ([]*peerDoc, error) {
	var out []*peerDoc
	seen := map[string]string{}
	for _, p := range peerPaths(list) {
		key := filepath.Clean(p)
		if r, err := filepath.EvalSymlinks(p); err == nil {
			key = r
		}
		if first, ok := seen[key]; ok {
			return nil, usagef("--peers names %s twice (as %s and %s)", key, first, p)
		}
		seen[key] = p
		d := &peerDoc{}
		if err := readJSON(p, d); err != nil {
			return nil, asUsage(err)
		}
		if err := d.check(p); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	if len(out) > len(palette)-2 {
		return nil, usagef("--peers: at most %d peers", len(palette)-2)
	}
	return out, nil
}

// runPlot draws a bench JSON (and a peer's) as latency against M.
func runPlot(args []string) error {
	fs := newFlags("plot", "--bench bench.json [--peers peer_triton.json] --out FILE.svg")
	benchPath := fs.String("bench", "", "JSON written by kimimoe bench --json")
	peersPath := fs.String("peers", "", "JSONs written by the peer scripts of the same call (comma-separated; bench/README.md), optional")
	out := fs.String("out", "", "the plot to write (.svg, .png or .pdf)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *benchPath == "" || *out == "" {
		return usagef("--bench and --out are required")
	}
	format, kind, err := plotFormat(*out)
	if err != nil {
		return err
	}
	// Everything about the output before anything is read or drawn: a
	// failed plot leaves an existing file as it was.
	if err := checkOutput("out", *out, kind, append(inputsOf(*benchPath), peerPaths(*peersPath)...)...); err != nil {
		return err
	}
	doc, peers, err := readBenchPeers(*benchPath, *peersPath)
	if err != nil {
		return err
	}
	data, err := drawPlot(format, doc, peers)
	if err != nil {
		return err
	}
	return writeOutput(*out, data)
}

// plotFormat maps an output name's extension to gonum/plot's format.
func plotFormat(path string) (string, outputKind, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".svg":
		return "svg", kindSVG, nil
	case ".png":
		return "png", kindPNG, nil
	case ".pdf":
		return "pdf", kindPDF, nil
	}
	return "", "", usagef("--out %s: want a .svg, .png or .pdf name", path)
}

// maxJSONBytes bounds a bench or peer JSON read (a real one is a few KB).
const maxJSONBytes = 16 << 20

// Bounds on what a plot or comparison takes: far above any real file.
const (
	maxRows       = 1000
	maxLabelBytes = 256
)

// readJSON reads a JSON input: a regular file (a FIFO would block, a
// device never end) of at most maxJSONBytes.
func readJSON(path string, v any) error {
	data, err := regular.ReadFile(path, maxJSONBytes, "a bench or peer JSON")
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// checkRows refuses labels too long to print and token counts no bench
// writes or that appear twice: what the bench and peer files share.
func checkRows(path string, labels []string, ms []int) error {
	if len(ms) > maxRows {
		return usagef("%s has %d rows; want at most %d", path, len(ms), maxRows)
	}
	for _, s := range labels {
		if len(s) > maxLabelBytes {
			return usagef("%s: a label of %d bytes (at most %d)", path, len(s), maxLabelBytes)
		}
	}
	seen := map[int]bool{}
	for i, m := range ms {
		switch {
		case m < 1 || m > maxTokens:
			return usagef("%s: row %d has M = %d; want 1 to %d", path, i, m, maxTokens)
		case seen[m]:
			return usagef("%s: two rows of M = %d", path, m)
		}
		seen[m] = true
	}
	return nil
}

// maxMS bounds a time in a bench or peer file: an MoE forward of an hour
// is no measurement, and a time near the largest float64 broke the plot's
// axis.
const maxMS = 3.6e6

// check refuses what a log-log plot or a ratio cannot take: no rows, and
// times that are not positive and finite (checkRows the rest).
func (d *benchDoc) check(path string) error {
	if len(d.Rows) == 0 {
		return usagef("%s has no rows", path)
	}
	ms := make([]int, len(d.Rows))
	for i, r := range d.Rows {
		ms[i] = r.M
	}
	if err := checkRows(path, []string{d.Backend, d.Device, d.Date, d.Timing, d.Shape, d.Chain}, ms); err != nil {
		return err
	}
	for i, r := range d.Rows {
		if !(r.MedianMS > 0) || !(r.FloorMS > 0) || !(r.MedianMS <= maxMS) || !(r.FloorMS <= maxMS) {
			return usagef("%s: row %d (M = %d) has median %v ms and floor %v ms; want positive finite times", path, i, r.M, r.MedianMS, r.FloorMS)
		}
	}
	return nil
}

// check is benchDoc.check for a peer's file; rows without a time (M the
// peer did not run) are allowed and skipped.
func (d *peerDoc) check(path string) error {
	ms := make([]int, len(d.Rows))
	for i, r := range d.Rows {
		ms[i] = r.M
	}
	if err := checkRows(path, []string{d.Peer, d.DateUTC, d.Date, d.Device}, ms); err != nil {
		return err
	}
	for i, r := range d.Rows {
		if !(r.GraphMS >= 0) || !(r.Graph2 >= 0) || !(r.GraphMS <= maxMS) || !(r.Graph2 <= maxMS) {
			return usagef("%s: row %d (M = %d) has time %v ms", path, i, r.M, d.ms(i))
		}
	}
	return nil
}

// palette: kimimoe, the floor, then the peers.
var palette = []color.Color{color.RGBA{31, 119, 180, 255}, color.RGBA{110, 110, 110, 255}, color.RGBA{214, 39, 40, 255},
	color.RGBA{44, 160, 44, 255}, color.RGBA{148, 103, 189, 255}, color.RGBA{255, 127, 14, 255},
	color.RGBA{140, 86, 75, 255}, color.RGBA{227, 119, 194, 255}}

// drawPlot draws median latency and the floor (and the peer) against M,
// both axes logarithmic, and returns the file's bytes in format.
func drawPlot(format string, doc *benchDoc, peers []*peerDoc) ([]byte, error) {
	p := plot.New()
	shape := doc.Shape
	if shape == "" {
		shape = "Kimi EP32 rank 7"
	}
	chain := ""
	if doc.Chain != "" {
		chain = ", " + doc.Chain + " chain"
	}
	// Two short lines: one long line was clipped at both sides.
	p.Title.Text = fmt.Sprintf("kimimoe %s, %s%s\n%s, %.10s", doc.Backend, shape, chain, doc.Device, doc.Date)
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
		return nil, err
	}
	if err := series("floor: max(bytes/bandwidth, FLOPs/FP8 peak)", floor, true, 1); err != nil {
		return nil, err
	}
	for j, pd := range peers {
		var xy plotter.XYs
		for i, r := range pd.Rows {
			if t := pd.ms(i); t > 0 {
				xy = append(xy, plotter.XY{X: float64(r.M), Y: t})
			}
		}
		if len(xy) > 0 {
			if err := series(pd.name()+" (CUDA graph)", xy, false, 2+j); err != nil {
				return nil, err
			}
		}
	}
	// One M (or one time) would give a log axis of zero width; a margin
	// keeps the first and last markers whole.
	for _, ax := range []*plot.Axis{&p.X, &p.Y} {
		if ax.Min == ax.Max {
			ax.Min, ax.Max = ax.Min/2, ax.Max*2
		}
		ax.Min, ax.Max = ax.Min/1.25, ax.Max*1.25
	}
	w, err := p.WriterTo(16*vg.Centimeter, 11*vg.Centimeter, format)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
