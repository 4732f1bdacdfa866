//go:build cgo

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	"kimimoe/activation"
	"kimimoe/backend"
	"kimimoe/backend/cuda"
	"kimimoe/moe"
	"kimimoe/mxfp"
	"kimimoe/plan"
	"kimimoe/validation"
)

// openGroup opens the expert-parallel group the flags ask for: all
// devices from this process, or (under a launcher) this process's rank.
func openGroup(gf *groupFlags) (*cuda.Group, error) {
	mode, err := cuda.ParseMode(gf.mode)
	if err != nil {
		return nil, asUsage(err)
	}
	opts := cuda.GroupOptions{Mode: mode, Timeout: gf.timeout}
	if !gf.perRank {
		devs := make([]int, gf.devices)
		for i := range devs {
			devs[i] = i
		}
		return cuda.OpenGroup(devs, opts)
	}
	dev, err := rankDevice(gf.rank)
	if err != nil {
		return nil, err
	}
	id, err := groupID(gf)
	if err != nil {
		return nil, err
	}
	return cuda.OpenRank(id, gf.rank, gf.size, dev, opts)
}

// rankDevice is the device of a rank: KIMIMOE_DEVICE, else the launcher's
// LOCAL_RANK, else the rank (one node).
func rankDevice(rank int) (int, error) {
	for _, name := range []string{"KIMIMOE_DEVICE", "LOCAL_RANK"} {
		if v := os.Getenv(name); v != "" {
			d, err := strconv.Atoi(v)
			if err != nil || d < 0 {
				return 0, usagef("%s=%q is not a device ordinal", name, v)
			}
			return d, nil
		}
	}
	return rank, nil
}

// groupID is the group's NCCL unique id: from NCCL_COMM_ID (every rank
// derives the same id from the address; rank 0 listens there), or made
// by rank 0 and passed through the id file.
func groupID(gf *groupFlags) (cuda.UniqueID, error) {
	if os.Getenv("NCCL_COMM_ID") != "" || gf.rank == 0 {
		id, err := cuda.NewUniqueID()
		if err != nil || os.Getenv("NCCL_COMM_ID") != "" {
			return id, err
		}
		return id, cuda.WriteUniqueIDFile(gf.idFile, id)
	}
	return cuda.ReadUniqueIDFile(gf.idFile, gf.timeout)
}

func openGroupBackend(gf *groupFlags) (backend.Backend, error) {
	g, err := openGroup(gf)
	if err != nil {
		return nil, err
	}
	if gf.perRank {
		fmt.Fprintf(os.Stderr, "kimimoe: rank %d of %d joined the group\n", gf.rank, gf.size)
	}
	return g, nil
}

// deviceModeRow is one mode's figures at one token count.
type deviceModeRow struct {
	MedianMS       float64   `json:"median_ms"`
	CommMS         float64   `json:"comm_ms"`    // the communication alone, median
	CommShare      float64   `json:"comm_share"` // comm_ms / median_ms
	BytesPerDevice int64     `json:"bytes_per_device"`
	ModelBytes     float64   `json:"model_bytes_per_device"`
	ModelCommMS    float64   `json:"model_comm_ms"` // model bytes / the bus bandwidth measured in the run
	SpeedupVs1GPU  float64   `json:"speedup_vs_1gpu_eager"`
	SamplesMS      []float64 `json:"samples_ms"`
	CommSamplesMS  []float64 `json:"comm_samples_ms"`
}

// deviceRow is one token count's result of bench --devices.
type deviceRow struct {
	M              int                       `json:"m"`
	OneGPUGraphMS  float64                   `json:"one_gpu_graph_ms"`
	OneGPUEagerMS  float64                   `json:"one_gpu_eager_ms"`
	Modes          map[string]*deviceModeRow `json:"modes"`
	oneGraph, one1 []float64
}

// runBenchDevices times a 56-expert layer (top-16 over all 56, so each of
// two GPUs holds the Kimi per-rank 28 experts with about 8 slots of each
// token) on one GPU and spread over the group, in each mode, with the
// communication alone and the plan's model beside it.
func runBenchDevices(gf *groupFlags, o benchOptions) error {
	var modes []cuda.Mode
	switch gf.mode {
	case "both":
		modes = []cuda.Mode{cuda.ModeReplicated, cuda.ModeDispatch}
	default:
		m, err := cuda.ParseMode(gf.mode)
		if err != nil {
			return asUsage(err)
		}
		modes = []cuda.Mode{m}
	}
	gf.mode = modes[0].String()
	kimi := moe.KimiK3()
	spec := validation.CaseSpec{K: kimi.K, N: kimi.N, ELocal: 56, TopK: kimi.TopK, Activation: activation.Situ, Chain: o.chain,
		Recipe: mxfp.RecipeRCeil, WeightSeed: 5600}
	p := newProgress()
	defer p.done()
	p.update("generating the 56-expert layer's weights")
	w, err := validation.GenerateWeights(&spec)
	if err != nil {
		return err
	}
	g, err := openGroup(gf)
	if err != nil {
		return err
	}
	defer g.Close()
	one, err := cuda.OpenDevice(0)
	if err != nil {
		return err
	}
	defer one.Close()
	p.update("preparing")
	single, err := one.Prepare(w, spec.LayerSpec())
	if err != nil {
		return err
	}
	layers := map[cuda.Mode]*cuda.GroupLayer{}
	for _, m := range modes {
		if layers[m], err = g.PrepareMode(w, spec.LayerSpec(), m); err != nil {
			return err
		}
	}
	rows := make([]deviceRow, len(o.ms))
	for j, m := range o.ms {
		s := spec
		s.Name, s.M, s.Seed = fmt.Sprintf("bench_m%d", m), m, uint64(m)
		c, err := validation.GenerateCase(&s, w)
		if err != nil {
			return err
		}
		rows[j] = deviceRow{M: m, Modes: map[string]*deviceModeRow{}}
		p.update("uploading M=%d", m)
		if err := single.(backend.Timer).Upload(&c.Input); err != nil {
			return err
		}
		for mode, l := range layers {
			if err := l.Upload(&c.Input); err != nil {
				return err
			}
			rows[j].Modes[mode.String()] = &deviceModeRow{}
		}
		for range o.warmup {
			if _, err := single.(backend.Timer).TimeForward(m, true); err != nil {
				return err
			}
			for _, l := range layers {
				if _, err := l.TimeForward(m, false); err != nil {
					return err
				}
			}
		}
	}
	start := time.Now()
	for round := range o.rounds {
		for k := range o.ms {
			j := (k + round) % len(o.ms)
			m := o.ms[j]
			r := &rows[j]
			p.update("round %d/%d, M=%d", round+1, o.rounds, m)
			for _, graph := range []bool{true, false} {
				t, err := single.(backend.Timer).TimeForward(m, graph)
				if err != nil {
					return err
				}
				if graph {
					r.oneGraph = append(r.oneGraph, t)
				} else {
					r.one1 = append(r.one1, t)
				}
			}
			for mode, l := range layers {
				mr := r.Modes[mode.String()]
				t, err := l.TimeForward(m, false)
				if err != nil {
					return err
				}
				mr.SamplesMS = append(mr.SamplesMS, t)
				if t, err = l.TimeComm(m); err != nil {
					return err
				}
				mr.CommSamplesMS = append(mr.CommSamplesMS, t)
			}
		}
	}
	p.update("measuring the link")
	busbw, err := g.LinkBandwidth(256<<20, 20)
	if err != nil {
		return err
	}
	p.done()
	fmt.Printf("kimimoe bench --devices %d: %s, %s\n", g.Size(), g.Capabilities().Device, time.Now().UTC().Format("2006-01-02"))
	fmt.Printf("layer: 56 experts (%d per device), K=%d N=%d, top-%d over all 56, SiTU, chain %v, rceil; x given as float32\n",
		56/g.Size(), kimi.K, kimi.N, kimi.TopK, o.chain)
	fmt.Printf("NCCL all-reduce bus bandwidth (256 MiB, measured now): %.1f GB/s; model = plan.EPLayer bytes / that bandwidth\n", busbw/1e9)
	fmt.Printf("1 GPU: the same layer on device 0 alone (graph / eager). Group times are eager (collectives are not captured), the longest device, median of %d interleaved rounds in %.1fs\n",
		o.rounds, time.Since(start).Seconds())
	fmt.Printf("%6s %9s %9s", "M", "1gpu grf", "1gpu eag")
	for _, mode := range modes {
		n := mode.String()[:4]
		fmt.Printf(" | %-4s %9s %8s %6s %9s %9s %6s", n, "ms", "comm ms", "share", "MB/dev", "model MB", "mdl ms")
	}
	fmt.Println()
	for j := range rows {
		r := &rows[j]
		r.OneGPUGraphMS, r.OneGPUEagerMS = median(r.oneGraph), median(r.one1)
		fmt.Printf("%6d %9.4f %9.4f", r.M, r.OneGPUGraphMS, r.OneGPUEagerMS)
		for _, mode := range modes {
			mr := r.Modes[mode.String()]
			l := layers[mode]
			mr.MedianMS, mr.CommMS = median(mr.SamplesMS), median(mr.CommSamplesMS)
			mr.CommShare = mr.CommMS / mr.MedianMS
			mr.SpeedupVs1GPU = r.OneGPUEagerMS / mr.MedianMS
			if mr.BytesPerDevice, err = l.CommBytes(r.M); err != nil {
				return err
			}
			model := plan.EPLayer{Devices: g.Size(), Tokens: r.M, Hidden: kimi.K, TopK: kimi.TopK, Experts: 56}
			mr.ModelBytes = model.ReplicatedBytes()
			if mode == cuda.ModeDispatch {
				mr.ModelBytes = model.DispatchBytes()
			}
			mr.ModelCommMS = plan.Seconds(mr.ModelBytes, busbw) * 1e3
			fmt.Printf(" | %-4s %9.4f %8.4f %6.2f %9.2f %9.2f %6.3f", "", mr.MedianMS, mr.CommMS, mr.CommShare,
				float64(mr.BytesPerDevice)/1e6, mr.ModelBytes/1e6, mr.ModelCommMS)
		}
		fmt.Println()
	}
	if o.jsonPath != "" {
		doc := map[string]any{"backend": "cuda", "device": g.Capabilities().Device, "devices": g.Size(), "date": time.Now().UTC().Format(time.RFC3339),
			"experts": 56, "chain": o.chain.String(), "rounds": o.rounds, "nccl_busbw_bytes_per_s": busbw, "rows": rows}
		data, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return err
		}
		return writeJSON(o.jsonPath, append(data, '\n'))
	}
	return nil
}
