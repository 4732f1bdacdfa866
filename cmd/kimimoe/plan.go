package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strings"

	"kimimoe/plan"
)

func runPlan(args []string) error {
	fs := newFlags("plan", "--model kimi-k3 --tp 32 --ep 4 --dp 1 [--pp 1] --tokens 8192 [--json]")
	model := fs.String("model", "kimi-k3", "model preset")
	var d plan.Deployment
	fs.IntVar(&d.TP, "tp", 32, "tensor-parallel size")
	fs.IntVar(&d.EP, "ep", 4, "expert-parallel size")
	fs.IntVar(&d.DP, "dp", 1, "MoE data-parallel size")
	fs.IntVar(&d.PP, "pp", 1, "pipeline-parallel size")
	fs.IntVar(&d.Nodes, "nodes", 0, "nodes (0: not checked)")
	fs.IntVar(&d.GPUsPerNode, "gpus-per-node", 0, "GPUs per node (0: not checked)")
	fs.IntVar(&d.Tokens, "tokens", 8192, "tokens per prefill step")
	fs.IntVar(&d.DTypeBytes, "dtype-bytes", 2, "bytes per reduced element (bf16: 2)")
	asJSON := fs.Bool("json", false, "print JSON instead of tables")
	epDevices := fs.Int("ep-layer-devices", 0, "instead: model one MoE layer of --ep-layer-experts spread over this many GPUs (kimimoe bench --devices): bytes each GPU sends per mode")
	epExperts := fs.Int("ep-layer-experts", 56, "with --ep-layer-devices: the layer's experts (top-k from --model)")
	linkGBps := fs.Float64("link-gbps", 0, "with --ep-layer-devices or --a2a: also the time at this bandwidth, GB/s each way per rank (NCCL busbw for the all-reduce)")
	a2a := fs.Bool("a2a", false, "instead: model the MoE as SGLang's DeepEP deployments run it: --ep ranks, each with its own --tokens per prefill step and --decode-tokens per decode step, all-to-all dispatch and combine")
	decodeTokens := fs.Int("decode-tokens", 128, "with --a2a: tokens per rank per decode step")
	latencyUS := fs.Float64("latency-us", 0, "with --a2a and --link-gbps: fixed cost of each dispatch and combine, microseconds")
	dispatchFmt := fs.String("dispatch", "fp8", "with --a2a: dispatched x as fp8 (1 byte + a float32 scale per 128, DeepEP's) or bf16")
	var custom struct{ experts, topk, input, n, layers int }
	fs.IntVar(&custom.experts, "experts", 0, "with --a2a: routed experts (0: the model's)")
	fs.IntVar(&custom.topk, "topk", 0, "with --a2a: experts a token (0: the model's)")
	fs.IntVar(&custom.input, "moe-input", 0, "with --a2a: the MoE's input and output width, elements (0: the model's)")
	fs.IntVar(&custom.n, "intermediate", 0, "with --a2a: an expert's intermediate width, for the weight bytes (0: the model's)")
	fs.IntVar(&custom.layers, "moe-layers", 0, "with --a2a: MoE layers (0: the model's)")
	if err := parse(fs, args); err != nil {
		return err
	}
	// A flag of another mode would be ignored: refuse it instead.
	mode := "plan"
	switch {
	case *a2a:
		mode = "--a2a"
	case *epDevices > 0:
		mode = "--ep-layer-devices"
	}
	only := map[string][]string{
		"--a2a":              {"decode-tokens", "latency-us", "dispatch", "experts", "topk", "moe-input", "intermediate", "moe-layers", "link-gbps"},
		"--ep-layer-devices": {"ep-layer-experts", "link-gbps"},
	}
	var bad []string
	fs.Visit(func(f *flag.Flag) {
		for m, names := range only {
			if m != mode && slices.Contains(names, f.Name) && !slices.Contains(only[mode], f.Name) {
				bad = append(bad, fmt.Sprintf("--%s (%s only)", f.Name, m))
			}
		}
	})
	if bad != nil {
		slices.Sort(bad)
		return usagef("%s: not used by this mode (%s)", strings.Join(slices.Compact(bad), ", "), mode)
	}
	models := plan.Models()
	m, ok := models[*model]
	if !ok {
		var names []string
		for n := range models {
			names = append(names, n)
		}
		sort.Strings(names)
		return usagef("unknown model %q (known: %s)", *model, strings.Join(names, ", "))
	}
	if *a2a {
		for _, c := range []struct {
			flag string
			v    int
			dst  *int
		}{{"--experts", custom.experts, &m.NumExperts}, {"--topk", custom.topk, &m.TopK}, {"--moe-input", custom.input, &m.K},
			{"--intermediate", custom.n, &m.N}, {"--moe-layers", custom.layers, nil}} {
			switch {
			case c.v < 0:
				return usagef("%s %d: want a positive number, or 0 for the model's", c.flag, c.v)
			case c.v > 0 && c.dst != nil:
				*c.dst = c.v
				m.Name = "custom (" + *model + " with flags)"
			case c.v > 0: // the MoE layer count: all layers MoE
				m.NumLayers, m.FirstKDenseReplace = c.v, 0
				m.Name = "custom (" + *model + " with flags)"
			}
		}
		return printAllToAll(m, d, *decodeTokens, *dispatchFmt, *linkGBps, *latencyUS)
	}
	if *epDevices > 0 {
		return printEPLayer(m, plan.EPLayer{Devices: *epDevices, Tokens: d.Tokens, Hidden: m.K, TopK: m.TopK, Experts: *epExperts}, *linkGBps)
	}
	p, err := plan.Make(m, d)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(p)
	}
	printPlan(m, p)
	return nil
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }
func gib(b int64) string { return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30)) }

func printPlan(m plan.Model, p *plan.Plan) {
	d, em := p.Deployment, p.Mapping
	fmt.Printf("%s: hidden %d, routed latent %d, %d experts x N=%d, top-%d, %d layers (%d MoE), MLA latent %d\n",
		m.Name, m.Hidden, m.K, m.NumExperts, m.N, m.TopK, m.NumLayers, m.MoELayers(), m.MLALatent())
	fmt.Printf("deployment: TP%d / EP%d / DP%d / PP%d, %d tokens per step, %d-byte elements\n\n", d.TP, d.EP, d.DP, d.PP, d.Tokens, d.DTypeBytes)

	fmt.Println("Expert mapping")
	fmt.Printf("  moe_tp_size = tp/ep/dp = %d/%d/%d = %d\n", d.TP, d.EP, d.DP, em.MoETPSize)
	fmt.Printf("  local experts = %d/%d = %d per EP rank; each rank holds an N/%d = %d slice of their intermediate\n",
		m.NumExperts, d.EP, em.LocalExperts, em.MoETPSize, em.IntermediateEach)
	for r, rg := range em.Ranges {
		if r < 4 || r == len(em.Ranges)-1 {
			fmt.Printf("  EP rank %2d: global experts [%d, %d)\n", r, rg[0], rg[1])
		} else if r == 4 {
			fmt.Println("  ...")
		}
	}
	for _, st := range p.Stages {
		fmt.Printf("\nPrefill step collectives per rank (stage %d, layers [%d, %d))\n", st.Stage, st.Layers[0], st.Layers[1])
		fmt.Printf("  %-44s %6s %-18s %9s %10s %6s\n", "source", "count", "message", "", "per step", "share")
		for _, c := range append(st.Collectives, st.Total) {
			msg := fmt.Sprintf("[%d, %d]", d.Tokens, c.Width)
			size := mib(c.MessageBytes)
			if c.Name == "total" {
				msg, size = "", ""
			}
			fmt.Printf("  %-44s %6d %-18s %9s %10s %5.1f%%\n", c.Name, c.Count, msg, size, gib(c.StepBytes), 100*c.Share)
		}
	}
	if m.MLALatent() == 0 {
		return // the alternatives feed MLA's latent
	}
	fmt.Printf("\nRing traffic per rank at each attention input (H=%d, L=%d, n=%d)\n", m.Hidden, m.MLALatent(), d.TP)
	for _, a := range p.Alternatives {
		fmt.Printf("  %-60s %-7s %6d units  %+6.1f%%  %s/rank\n", a.Name, a.Formula, a.Units, 100*a.Change, mib(a.RankBytes))
	}
}

// printEPLayer prints the communication model of one MoE layer spread
// over several GPUs (what bench --devices measures).
func printEPLayer(m plan.Model, l plan.EPLayer, linkGBps float64) error {
	if err := l.Validate(); err != nil {
		return asUsage(err)
	}
	if !(linkGBps >= 0) || math.IsInf(linkGBps, 0) {
		return usagef("--link-gbps %v: want a finite bandwidth >= 0", linkGBps)
	}
	fmt.Printf("%s MoE layer: %d experts over %d GPUs (%d each), top-%d, %d tokens, hidden %d, float32 partial outputs\n",
		m.Name, l.Experts, l.Devices, l.Experts/l.Devices, l.TopK, l.Tokens, l.Hidden)
	fmt.Printf("  a token reaches a given other GPU with probability %.4f (uniform routing)\n", l.ReachProbability())
	for _, row := range []struct {
		name  string
		bytes float64
	}{{"replicated (all-reduce)", l.ReplicatedBytes()}, {"dispatch (MXFP8 out, partials back)", l.DispatchBytes()}} {
		fmt.Printf("  %-36s %10.2f MiB sent per GPU", row.name, row.bytes/(1<<20))
		if linkGBps > 0 {
			fmt.Printf("  %8.4f ms at %.0f GB/s", plan.Seconds(row.bytes, linkGBps*1e9)*1e3, linkGBps)
		}
		fmt.Println()
	}
	return nil
}

// printAllToAll prints the all-to-all model of m's MoE over d.EP ranks:
// what each rank sends per layer and per step, its expert weights, and
// the communication time of a prefill and a decode step at the link.
func printAllToAll(m plan.Model, d plan.Deployment, decodeTokens int, dispatch string, linkGBps, latencyUS float64) error {
	el := map[string]float64{"fp8": plan.DispatchFP8, "bf16": 2}[dispatch]
	if el == 0 {
		return usagef("--dispatch %q: want fp8 or bf16", dispatch)
	}
	if !(linkGBps >= 0) || !(latencyUS >= 0) || decodeTokens < 0 || math.IsInf(linkGBps, 0) || math.IsInf(latencyUS, 0) {
		return usagef("--link-gbps, --latency-us and --decode-tokens must be finite and not negative")
	}
	steps := []struct {
		name   string
		tokens int
	}{{"prefill", d.Tokens}, {"decode", decodeTokens}}
	var rows []plan.AllToAll
	for _, st := range steps {
		a := plan.AllToAll{EP: d.EP, TokensPerRank: st.tokens, Hidden: m.K, TopK: m.TopK, NumExperts: m.NumExperts,
			DispatchBytes: el, CombineBytes: plan.CombineBF16}
		if err := a.Validate(); err != nil {
			return asUsage(err)
		}
		rows = append(rows, a)
	}
	a := rows[0]
	layers := m.MoELayers()
	fmt.Printf("%s: MoE input %d, %d experts, top-%d, %d MoE layers; EP%d all-to-all (DeepEP-style), %d experts a rank\n",
		m.Name, m.K, m.NumExperts, m.TopK, layers, d.EP, m.NumExperts/d.EP)
	fmt.Printf("  a token goes to %.2f other ranks (de-duplicated per rank; %.2f of its slots are remote), uniform routing\n",
		a.RemoteRanks(), a.RemoteSlots())
	fmt.Printf("  dispatch %s: %.4g bytes an element; combine bf16: 2 bytes an element\n", dispatch, el)
	wb := plan.ExpertWeightBytes(m.Model, d.EP)
	fmt.Printf("  routed expert weights a rank (MXFP4 with E8M0 scales): %.0f MiB a layer, %.2f GiB for the %d MoE layers\n",
		wb/(1<<20), wb*float64(layers)/(1<<30), layers)
	fmt.Println("MiB = 2^20 bytes; sent = what one rank sends (it receives as much, on average)")
	fmt.Printf("  %-8s %8s %14s %14s %16s", "step", "tokens", "dispatch/layer", "combine/layer", "sent per step")
	if linkGBps > 0 {
		fmt.Printf(" %14s", "comm per step")
	}
	fmt.Println()
	link := plan.Link{Bandwidth: linkGBps * 1e9, Latency: latencyUS * 1e-6}
	for i, r := range rows {
		dis, com := r.DispatchRankBytes(), r.CombineRankBytes()
		fmt.Printf("  %-8s %8d %10.2f MiB %10.2f MiB %12.2f MiB", steps[i].name, r.TokensPerRank, dis/(1<<20), com/(1<<20),
			float64(layers)*(dis+com)/(1<<20))
		if linkGBps > 0 {
			t := float64(layers) * (link.Seconds(dis) + link.Seconds(com))
			fmt.Printf(" %11.3f ms", t*1e3)
		}
		fmt.Println()
	}
	if linkGBps > 0 {
		fmt.Printf("  comm per step = MoE layers x (2 x %.1f us + (dispatch + combine) / %.0f GB/s); no overlap with compute\n", latencyUS, linkGBps)
	}
	return nil
}
