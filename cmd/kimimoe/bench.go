package main

import (
	"encoding/json"
	"fmt"
	"kimimoe/validation"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"kimimoe/activation"
	"kimimoe/backend"
	"kimimoe/backend/cuda"
	"kimimoe/moe"
	"kimimoe/mxfp"
)

// median of v (not empty): the middle value, or the mean of the two
// middle ones.
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// benchOptions are the flags bench --devices uses.
type benchOptions struct {
	ms             []int
	rounds, warmup int
	chain          moe.Chain
	jsonPath       string
}

// benchRow is one token count's result.
type benchRow struct {
	M            int       `json:"m"`
	LocalPairs   int       `json:"local_pairs"`
	Experts      int       `json:"experts_touched"`
	Bytes        int64     `json:"bytes"`
	FLOPs        float64   `json:"flops"`
	MedianMS     float64   `json:"median_ms"`
	MinMS        float64   `json:"min_ms"`
	MaxMS        float64   `json:"max_ms"`
	GBps         float64   `json:"achieved_gbps"`
	TFLOPs       float64   `json:"achieved_tflops"`
	FloorMS      float64   `json:"floor_ms"`
	FloorBound   string    `json:"floor_bound"`
	RatioToFloor float64   `json:"ratio_to_floor"`
	Path         string    `json:"path,omitempty"`
	Plan         string    `json:"plan,omitempty"` // the launch plan (cuda.Plan.String)
	SamplesMS    []float64 `json:"samples_ms"`
}

func runBench(args []string) error {
	cfg, err := parseBench(args)
	if err != nil {
		return err
	}
	if cfg.devices != nil {
		return runBenchDevices(cfg.devices, benchOptions{ms: cfg.ms, rounds: cfg.rounds, warmup: cfg.warmup, chain: cfg.chain, jsonPath: cfg.jsonPath})
	}
	res, err := measureBench(cfg)
	if err != nil {
		return err
	}
	return reportBench(cfg, res)
}

// benchConfig is bench's command line, checked. With --devices only
// devices and the fields benchOptions takes are set.
type benchConfig struct {
	devices                *groupFlags // --devices: the group bench
	name                   string      // the backend
	ms                     []int
	rounds, warmup, copyMB int
	graph, profile         bool
	chain                  moe.Chain
	peak                   float64
	jsonPath, plotPath     string
	plotFmt                string
	peers                  []*peerDoc // the plot's, read and matched to the layer
	tuning                 cuda.Tuning
	shape                  benchLayer
	spec                   validation.CaseSpec // the shape's, with --k and --n applied
}

// parseBench reads and checks bench's flags.
func parseBench(args []string) (*benchConfig, error) {
	fs := newFlags("bench", "[--backend cuda] [--m 1,128,512,2048,8192] [--rounds 20] [--json FILE]")
	name := fs.String("backend", "cuda", "backend (must time on a device)")
	msFlag := fs.String("m", "1,2,4,8,16,32,128,256,512,1024,2048,8192", "token counts")
	rounds := fs.Int("rounds", 20, "interleaved timed rounds")
	warmup := fs.Int("warmup", 3, "untimed forwards per token count first")
	graph := fs.Bool("graph", true, "time CUDA-graph replays (else eager launches)")
	chainName := fs.String("chain", "mxfp8", "precision chain")
	peak := fs.Float64("fp8-peak", 1385, "FP8 matrix peak in TFLOP/s for the floor (torch._scaled_mm measured on the H200; docs/CONTRACT.md)")
	copyMB := fs.Int("copy-mb", 2048, "size of the copy used to measure bandwidth, MiB")
	jsonPath := fs.String("json", "", "also write the results as JSON to this file (- for stdout)")
	profile := fs.Bool("profile", false, "also print one eager forward's time per kernel, per M")
	plotPath := fs.String("plot", "", "also draw latency against M to this file (.svg, .png, .pdf)")
	peersPath := fs.String("peers", "", "with --plot: peer JSONs to draw beside, comma-separated")
	tune := addTuneFlag(fs)
	kFlag := fs.Int("k", 0, "hidden size K of the benched layer (0: Kimi's 3584); a small K and N measure the forward's fixed costs")
	nFlag := fs.Int("n", 0, "intermediate size N of the benched layer (0: Kimi's 3072)")
	shapeName := fs.String("shape", "kimi", "the benched layer: kimi (Kimi-K3 EP32 rank 7, SiTU), gpt-oss-120b or gpt-oss-20b (the whole layer on one GPU, swiglu_oai with FC biases)")
	gf := addGroupFlags(fs, "replicated, dispatch, both", "both")
	if err := parse(fs, args); err != nil {
		return nil, err
	}
	group, err := gf.check(*name)
	if err != nil {
		return nil, err
	}
	chain, err := moe.ParseChain(*chainName)
	if err != nil {
		return nil, asUsage(err)
	}
	shape, err := benchShape(*shapeName, chain)
	if err != nil {
		return nil, err
	}
	for _, d := range []struct {
		flag string
		v    int
	}{{"--k", *kFlag}, {"--n", *nFlag}} {
		if d.v < 0 || d.v%32 != 0 {
			return nil, usagef("%s %d: must be a positive multiple of 32 (MX blocks), or 0 for Kimi's", d.flag, d.v)
		}
	}
	if err := checkJSONOutput(*jsonPath, peerPaths(*peersPath)...); err != nil {
		return nil, err
	}
	var plotFmt string
	if *plotPath != "" {
		var kind outputKind
		if plotFmt, kind, err = plotFormat(*plotPath); err != nil {
			return nil, err
		}
		if err := checkOutput("plot", *plotPath, kind, append(peerPaths(*peersPath), inputsOf(*jsonPath)...)...); err != nil {
			return nil, err
		}
	}
	ms, err := parseTokenCounts(*msFlag)
	if err != nil {
		return nil, err
	}
	if group {
		if gf.perRank {
			return nil, usagef("bench --devices runs all devices from one process (unset RANK/WORLD_SIZE)")
		}
		if *kFlag != 0 || *nFlag != 0 || *shapeName != "kimi" {
			return nil, usagef("--k, --n and --shape: not with --devices (it benches the Kimi shape)")
		}
		if len(ms) > 16 || *rounds < 1 || *warmup < 0 {
			return nil, usagef("--m: at most 16 token counts; --rounds at least 1, --warmup at least 0")
		}
		if err := refuseTune(*name, *tune, "with --devices"); err != nil {
			return nil, err
		}
		return &benchConfig{devices: gf, ms: ms, rounds: *rounds, warmup: *warmup, chain: chain, jsonPath: *jsonPath}, nil
	}
	if len(ms) > 16 {
		return nil, usagef("--m: at most 16 token counts (a layer keeps the buffers of 16 at once)")
	}
	if *rounds < 1 || *warmup < 0 || *copyMB < 1 || !(*peak > 0) {
		return nil, usagef("--rounds must be at least 1, --warmup at least 0, --copy-mb at least 1, --fp8-peak positive")
	}
	tuning, err := parseTune(*name, *tune)
	if err != nil {
		return nil, err
	}
	cfg := &benchConfig{name: *name, ms: ms, rounds: *rounds, warmup: *warmup, copyMB: *copyMB, graph: *graph, profile: *profile,
		chain: chain, peak: *peak, jsonPath: *jsonPath, plotPath: *plotPath, plotFmt: plotFmt, tuning: tuning, shape: shape, spec: shape.spec}
	if *kFlag != 0 {
		cfg.spec.K = *kFlag
	}
	if *nFlag != 0 {
		cfg.spec.N = *nFlag
	}
	if *plotPath != "" {
		if cfg.peers, err = readPeers(*peersPath); err != nil {
			return nil, err
		}
		if err := samePeerLayer("bench --shape "+*shapeName, cfg.spec.K, cfg.spec.N, cfg.peers); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// benchResult is what one bench measured.
type benchResult struct {
	backend, device string
	rows            []benchRow
	bandwidth       float64 // copy bandwidth, bytes/s
	timing          string  // how the forwards were timed
	elapsed         time.Duration
	profiles        []map[string]float64 // with --profile: per M, each kernel's ms
	fc1, fc2        int64                // an expert's FC1 and FC2 bytes (codes, scales, bias)
}

// measureBench prepares the layer and times every M in interleaved
// rounds, then measures the copy bandwidth the floor uses.
func measureBench(cfg *benchConfig) (*benchResult, error) {
	b, err := backend.Open(cfg.name)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	meter, ok := b.(backend.BandwidthMeter)
	if !ok {
		return nil, fmt.Errorf("backend %q cannot measure device bandwidth; bench needs a GPU backend", cfg.name)
	}
	spec := cfg.spec
	p := newProgress()
	defer p.done()
	p.update("generating the %s weights (%d experts, K=%d, N=%d)", cfg.shape.name, spec.ELocal, spec.K, spec.N)
	w, err := validation.GenerateWeights(&spec)
	if err != nil {
		return nil, err
	}
	p.update("preparing the layer on %s", b.Name())
	layer, err := b.Prepare(w, spec.LayerSpec())
	if err != nil {
		return nil, err
	}
	defer layer.Close()
	if cfg.tuning != (cuda.Tuning{}) {
		if err := layer.(interface{ SetTuning(cuda.Tuning) error }).SetTuning(cfg.tuning); err != nil {
			return nil, err
		}
	}
	timer, ok := layer.(backend.Timer)
	if !ok {
		return nil, fmt.Errorf("backend %q cannot time a forward on a device", cfg.name)
	}
	res := &benchResult{backend: b.Name(), device: b.Capabilities().Device, rows: make([]benchRow, len(cfg.ms)), timing: "CUDA events"}
	res.fc1 = int64(len(w.W31)+len(w.W31Scale)+4*len(w.W31Bias)) / int64(w.E)
	res.fc2 = int64(len(w.W2)+len(w.W2Scale)+4*len(w.W2Bias)) / int64(w.E)
	perExpert := res.fc1 + res.fc2
	for j, m := range cfg.ms {
		s := spec
		s.Name, s.M, s.Seed = fmt.Sprintf("bench_m%d", m), m, uint64(m)
		c, err := validation.GenerateCase(&s, w)
		if err != nil {
			return nil, err
		}
		touched := map[int]bool{}
		pairs := 0
		for _, id := range c.Input.TopKIDs {
			if e, ok := s.EP.Local(int64(id), w.E); ok {
				touched[e] = true
				pairs++
			}
		}
		r := &res.rows[j]
		r.M, r.LocalPairs, r.Experts = m, pairs, len(touched)
		if pf, ok := layer.(interface{ PlanFor(m, topk int) cuda.Plan }); ok {
			plan := pf.PlanFor(m, s.TopK)
			r.Path, r.Plan = plan.Path.String(), plan.String()
		}
		// Fewest bytes: each touched expert's weights and scales once, x in
		// (float32), the routing, and the float32 output.
		r.Bytes = int64(len(touched))*perExpert + int64(m*spec.K*4) + int64(m*spec.TopK*8) + int64(m*spec.K*4)
		r.FLOPs = float64(pairs) * 2 * float64(3*spec.N*spec.K)
		p.update("uploading M=%d", m)
		if err := timer.Upload(&c.Input); err != nil {
			return nil, err
		}
		for range cfg.warmup {
			if _, err := timer.TimeForward(m, cfg.graph); err != nil {
				return nil, err
			}
		}
	}
	start := time.Now()
	for round := range cfg.rounds {
		for k := range cfg.ms { // rotate the order each round
			j := (k + round) % len(cfg.ms)
			p.update("round %d/%d, M=%d", round+1, cfg.rounds, cfg.ms[j])
			t, err := timer.TimeForward(cfg.ms[j], cfg.graph)
			if err != nil {
				return nil, err
			}
			res.rows[j].SamplesMS = append(res.rows[j].SamplesMS, t)
		}
	}
	res.elapsed = time.Since(start)
	if tm, ok := layer.(interface{ TimingMethod() (string, error) }); ok {
		method, err := tm.TimingMethod()
		if err != nil {
			return nil, err
		}
		res.timing += ", " + method
	}
	p.update("measuring copy bandwidth")
	if res.bandwidth, err = meter.CopyBandwidth(cfg.copyMB<<20, 20); err != nil {
		return nil, err
	}
	if prof, ok := layer.(interface {
		Profile(m int) (map[string]float64, error)
	}); ok && cfg.profile {
		for _, m := range cfg.ms {
			p.update("profiling M=%d", m)
			steps, err := prof.Profile(m)
			if err != nil {
				return nil, err
			}
			res.profiles = append(res.profiles, steps)
		}
	}
	return res, nil
}

// reportBench prints the table (to stderr with --json -) and writes the
// plot and the JSON.
func reportBench(cfg *benchConfig, res *benchResult) error {
	out := os.Stdout
	if cfg.jsonPath == "-" {
		out = os.Stderr
	}
	spec, rows, bw := &cfg.spec, res.rows, res.bandwidth
	fmt.Fprintf(out, "kimimoe bench: backend %s (%s), %s\n", res.backend, res.device, time.Now().UTC().Format("2006-01-02"))
	title := cfg.shape.title
	if spec.K != cfg.shape.spec.K || spec.N != cfg.shape.spec.N {
		title += " routing at a smaller layer"
	}
	fmt.Fprintf(out, "shape: %s, %s; graph=%v\n", title, describeSpec(spec), cfg.graph)
	fmt.Fprintf(out, "floor = max(bytes / %.2f TB/s (copy, measured now), FLOPs / %.0f TFLOP/s (FP8 peak, torch._scaled_mm on the H200)); median of %d interleaved rounds (%s) in %.1fs\n",
		bw/1e12, cfg.peak, cfg.rounds, res.timing, res.elapsed.Seconds())
	fmt.Fprintf(out, "%6s %8s %8s %10s %10s %10s %9s %9s %9s %8s  %s\n", "M", "experts", "MB", "median ms", "min ms", "max ms", "GB/s", "TFLOP/s", "floor ms", "x floor", "path")
	for j := range rows {
		r := &rows[j]
		r.MedianMS, r.MinMS, r.MaxMS = median(r.SamplesMS), slices.Min(r.SamplesMS), slices.Max(r.SamplesMS)
		sec := r.MedianMS / 1e3
		r.GBps = float64(r.Bytes) / sec / 1e9
		r.TFLOPs = r.FLOPs / sec / 1e12
		memMS, fpMS := float64(r.Bytes)/bw*1e3, r.FLOPs/(cfg.peak*1e12)*1e3
		r.FloorMS, r.FloorBound = memMS, "memory"
		if fpMS > memMS {
			r.FloorMS, r.FloorBound = fpMS, "compute"
		}
		r.RatioToFloor = r.MedianMS / r.FloorMS
		fmt.Fprintf(out, "%6d %8d %8.1f %10.4f %10.4f %10.4f %9.0f %9.1f %9.4f %8.2f  %s\n",
			r.M, r.Experts, float64(r.Bytes)/1e6, r.MedianMS, r.MinMS, r.MaxMS, r.GBps, r.TFLOPs, r.FloorMS, r.RatioToFloor, r.Path)
	}
	if cfg.tuning != (cuda.Tuning{}) {
		fmt.Fprintf(out, "launch policy overridden: --tune %s\n", cfg.tuning)
	}
	for _, r := range rows {
		if r.Plan != "" {
			fmt.Fprintf(out, "plan %s\n", r.Plan)
		}
	}
	if len(res.profiles) > 0 {
		fmt.Fprintln(out, "per-kernel device time of one eager forward, ms (a GEMM's touched experts' weights once, over its time):")
		for i, steps := range res.profiles {
			fmt.Fprintln(out, profileLine(cfg.ms[i], steps, rows[i].Experts, res.fc1, res.fc2))
		}
	}
	date := time.Now().UTC().Format(time.RFC3339)
	if cfg.plotPath != "" {
		doc := benchDoc{Backend: res.backend, Device: res.device, Date: date, Shape: title, Rows: rows}
		data, err := drawPlot(cfg.plotFmt, &doc, cfg.peers)
		if err != nil {
			return err
		}
		if err := writeOutput(cfg.plotPath, data); err != nil {
			return err
		}
	}
	if cfg.jsonPath != "" {
		doc := map[string]any{"backend": res.backend, "device": res.device, "date": date, "k": spec.K, "n": spec.N,
			"shape": title, "biases": spec.Biases, "activation": spec.Activation.String(),
			"copy_bandwidth_bytes_per_s": bw, "fp8_peak_tflops": cfg.peak, "graph": cfg.graph, "chain": cfg.chain.String(), "rounds": cfg.rounds, "timing": res.timing, "rows": rows}
		data, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return err
		}
		if err := writeJSON(cfg.jsonPath, append(data, '\n')); err != nil {
			return err
		}
	}
	return nil
}

// A benched layer: its --shape name, the title bench prints and plots,
// and the case spec its weights and inputs come from.
type benchLayer struct {
	name, title string
	spec        validation.CaseSpec
}

// benchShape is the layer --shape names, on chain.
func benchShape(name string, chain moe.Chain) (benchLayer, error) {
	switch name {
	case "kimi":
		return benchLayer{name, "Kimi EP32 rank 7", validation.KimiEP32Rank7(activation.Situ, chain, mxfp.RecipeRCeil)}, nil
	case "gpt-oss-120b":
		return benchLayer{name, "GPT-OSS-120B (whole layer)", validation.GPTOSS(moe.GPTOSS120B(), chain, mxfp.RecipeRCeil)}, nil
	case "gpt-oss-20b":
		return benchLayer{name, "GPT-OSS-20B (whole layer)", validation.GPTOSS(moe.GPTOSS20B(), chain, mxfp.RecipeRCeil)}, nil
	}
	return benchLayer{}, usagef("--shape %q: want kimi, gpt-oss-120b or gpt-oss-20b", name)
}

// describeSpec is the header's account of a benched layer's shape.
func describeSpec(s *validation.CaseSpec) string {
	slots := ""
	if s.LocalSlots > 0 {
		slots = fmt.Sprintf(" with %d slots local", s.LocalSlots)
	}
	biases := ""
	if s.Biases {
		biases = " with FC biases"
	}
	return fmt.Sprintf("K=%d N=%d, %d local experts, top-%d%s, %v%s, chain %v, %v", s.K, s.N, s.ELocal, s.TopK, slots, s.Activation, biases, s.Chain, s.Recipe)
}

// profileLine is one M's per-kernel times, in name order; a GEMM step
// (gemm1..., gemm2...) also shows the rate at which it read the touched
// experts' FC1 or FC2 weights once, the stream a decode forward is bound by.
func profileLine(m int, steps map[string]float64, experts int, fc1, fc2 int64) string {
	var names []string
	for n := range steps {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "  M=%-5d", m)
	for _, n := range names {
		ms := steps[n]
		fmt.Fprintf(&b, " %s %.4f", n, ms)
		bytes := int64(0)
		switch {
		case strings.HasPrefix(n, "gemm1"):
			bytes = int64(experts) * fc1
		case strings.HasPrefix(n, "gemm2"):
			bytes = int64(experts) * fc2
		}
		if bytes > 0 && ms > 0 {
			fmt.Fprintf(&b, " (%.0f GB/s)", float64(bytes)/(ms/1e3)/1e9)
		}
	}
	return b.String()
}
