package check

import (
	"math"
	"slices"
	"strings"
	"testing"

	"kimimoe/moe"
	"kimimoe/mxfp"
	"kimimoe/safetensors"
	"kimimoe/validation"
)

// Each mistake of wild.go, made here independently of its builder, is
// named first and matches, while the case as given fails the candidate.
func TestDiagnoseNamesTheWildMistakes(t *testing.T) {
	mistakes := []struct {
		name, what string // what: a part of the winning variant's description
		mask       bool   // the case has -1 slots
		make       func(c *validation.Case) *validation.Case
	}{
		{"fp4_nibbles_swapped", "of w2 swapped", false, func(c *validation.Case) *validation.Case {
			d := copyCase(c)
			d.Weights.W2 = make([]uint8, len(c.Weights.W2))
			for i, b := range c.Weights.W2 {
				d.Weights.W2[i] = (b&0xF)<<4 | (b >> 4)
			}
			return d
		}},
		{"scale_exponent_off", "w31_scale off by +1", false, func(c *validation.Case) *validation.Case {
			d := copyCase(c)
			d.Weights.W31Scale = make([]uint8, len(c.Weights.W31Scale))
			for i, s := range c.Weights.W31Scale {
				d.Weights.W31Scale[i] = s + 1
			}
			return d
		}},
		{"scale_exponent_off", "w2_scale off by -2", false, func(c *validation.Case) *validation.Case {
			d := copyCase(c)
			d.Weights.W2Scale = make([]uint8, len(c.Weights.W2Scale))
			for i, s := range c.Weights.W2Scale {
				d.Weights.W2Scale[i] = s - 2
			}
			return d
		}},
		{"routing_weights_not_applied", "weight 1", false, func(c *validation.Case) *validation.Case {
			d := copyCase(c)
			d.Input.TopKWeights = make([]float32, len(c.Input.TopKWeights))
			for i := range d.Input.TopKWeights {
				d.Input.TopKWeights[i] = 1
			}
			return d
		}},
		{"topk_truncated", "first 2 of the 3", false, func(c *validation.Case) *validation.Case {
			d := copyCase(c)
			d.Input.TopKIDs = append([]int32(nil), c.Input.TopKIDs...)
			for tok := range c.Input.M {
				d.Input.TopKIDs[tok*3+2] = -1
			}
			return d
		}},
		{"ep_mask_wrapped", "last local expert", true, func(c *validation.Case) *validation.Case {
			d := copyCase(c)
			d.Input.TopKIDs = append([]int32(nil), c.Input.TopKIDs...)
			for i, id := range d.Input.TopKIDs {
				if id == -1 {
					d.Input.TopKIDs[i] = int32(c.Weights.E - 1)
				}
			}
			return d
		}},
		{"x_rounded_to_bf16", "x rounded to BF16", false, func(c *validation.Case) *validation.Case {
			d := copyCase(c)
			d.Input.X = make([]float32, len(c.Input.X))
			for i, v := range c.Input.X { // round to nearest even at bit 16 (the values are finite)
				b := math.Float32bits(v)
				d.Input.X[i] = math.Float32frombits((b + 0x7FFF + (b>>16)&1) &^ 0xFFFF)
			}
			return d
		}},
		{"situ_up_unsaturated", "up branch left linear", false, func(c *validation.Case) *validation.Case {
			d := copyCase(c)
			d.Spec.Params = append(d.Spec.Params[:0:0], c.Spec.Params...)
			for i := range d.Spec.Params {
				d.Spec.Params[i].SituLinearBeta = 1e12
			}
			return d
		}},
		{"marlin_scales_unpermuted", "w31_scale and w2_scale given to Marlin", false, func(c *validation.Case) *validation.Case {
			// vLLM's preparation, step by step on the column indices of a
			// 64-column group: at position p it puts column at[p]. Marlin
			// reads column n's scale at the position its preparation put
			// it; given the checkpoint's order, that position holds
			// column p's scale.
			at := make([]int, 64)
			for i := range at {
				at[i] = i
			}
			var perm []int
			for i := range 8 {
				for j := range 8 {
					perm = append(perm, i+8*j)
				}
			}
			step := make([]int, 64)
			for p, q := range perm {
				step[p] = at[q]
			}
			for p := range at {
				at[p] = step[p/4*4+[]int{0, 2, 1, 3}[p%4]]
			}
			d := copyCase(c)
			read := func(src []uint8, rows, cols int) []uint8 {
				dst := make([]uint8, len(src))
				for e := range c.Weights.E {
					for r := range rows {
						for p, col := range at {
							if r%64 == col {
								from := r/64*64 + p
								copy(dst[(e*rows+r)*cols:(e*rows+r+1)*cols], src[(e*rows+from)*cols:])
							}
						}
					}
				}
				return dst
			}
			w := c.Weights
			d.Weights.W31Scale = read(w.W31Scale, w.Rows(), w.K/32)
			d.Weights.W2Scale = read(w.W2Scale, w.K, w.N/32)
			return d
		}},
		{"gate_up_block_interleaved", "read as interleaved in blocks of 16", false, func(c *validation.Case) *validation.Case {
			// The kernel takes storage row j of each block of 32 as gate
			// (j%32 < 16) or up: the case as it computed has, as its up row
			// u and gate row g, the storage rows it read them from.
			d := copyCase(c)
			w := d.Weights
			n, kb, ks := w.N, w.K/2, w.K/32
			from := make([]int, 2*n)
			for j := range 2 * n {
				idx := j/32*16 + j%16
				if j%32 < 16 {
					from[n+idx] = j
				} else {
					from[idx] = j
				}
			}
			w.W31, w.W31Scale = make([]uint8, len(c.Weights.W31)), make([]uint8, len(c.Weights.W31Scale))
			for e := range w.E {
				for i := range 2 * n {
					copy(w.W31[(e*2*n+i)*kb:(e*2*n+i+1)*kb], c.Weights.W31[(e*2*n+from[i])*kb:])
					copy(w.W31Scale[(e*2*n+i)*ks:(e*2*n+i+1)*ks], c.Weights.W31Scale[(e*2*n+from[i])*ks:])
				}
			}
			return d
		}},
	}
	for _, m := range mistakes {
		t.Run(m.name+"/"+m.what, func(t *testing.T) {
			c := testCase(t, moe.ChainMXFP8, 1, 0, false)
			if m.mask {
				last := int32(c.Weights.E - 1)
				for tok := range c.Input.M {
					if ids := c.Input.TopKIDs[tok*3 : tok*3+3]; !slices.Contains(ids, last) {
						ids[1] = -1 // wrapped, the slot does not repeat an expert
					}
				}
			}
			r, err := Compare(c, candidate(t, m.make(c)), safetensors.F32, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if r.Pass {
				t.Fatalf("the case as given passes the %s candidate", m.name)
			}
			Diagnose(c, r)
			b := r.Best()
			if b == nil || r.Diagnosis[0].Name != m.name || b.Name != m.name || !strings.Contains(b.What, m.what) {
				t.Fatalf("diagnosis first: %+v, want %s (%q)", r.Diagnosis[0], m.name, m.what)
			}
			t.Logf("%s: %s, nrmse %.3g", b.Name, b.What, float64(b.NRMSE))
		})
	}
}

// An output a constant times the oracle's is diagnosed as uniform_scale,
// with the constant.
func TestDiagnoseUniformScale(t *testing.T) {
	c := testCase(t, moe.ChainMXFP8, 1, 0, true)
	cand := candidate(t, c)
	for i := range cand {
		cand[i] *= 2.827
	}
	r, err := Compare(c, cand, safetensors.F32, Options{})
	if err != nil {
		t.Fatal(err)
	}
	Diagnose(c, r)
	b := r.Best()
	if b == nil || b.Name != "uniform_scale" || !strings.Contains(b.What, "2.827") {
		t.Fatalf("diagnosis first: %+v", r.Diagnosis[0])
	}
}

// Options.Progress hears the oracle's run and every hypothesis as it starts.
func TestProgressNamesEachStep(t *testing.T) {
	c := testCase(t, moe.ChainMXFP8, 1, 0, false)
	cand := candidate(t, c)
	cand[0] += 1
	var steps []string
	r, err := Compare(c, cand, safetensors.F32, Options{Progress: func(s string) { steps = append(steps, s) }})
	if err != nil {
		t.Fatal(err)
	}
	Diagnose(c, r)
	all := strings.Join(steps, "\n")
	for _, want := range []string{"the oracle on 12 rows", "diagnosis: hypothesis 1/", "fp4_nibbles_swapped"} {
		if !strings.Contains(all, want) {
			t.Errorf("progress lacks %q:\n%s", want, all)
		}
	}
}

// A kernel whose MXFP8 quantization of x rounds the block exponent to
// nearest, log2(amax / 448) (MLX #4353), on the flashinfer chain, where x
// alone takes the case's recipe: made here with math.Log2 and
// EncodeE4M3, it fails and is named recipe_round, matched.
func TestDiagnoseNamesRecipeRound(t *testing.T) {
	c := testCase(t, moe.ChainFlashInfer, 1, 0, false)
	m, k := c.Input.M, c.Weights.K
	xq := mxfp.NewMXFP8Matrix(m, k)
	for b := range m * k / 32 {
		blk := c.Input.X[b*32 : b*32+32]
		amax := 0.0
		for _, v := range blk {
			amax = math.Max(amax, math.Abs(float64(v)))
		}
		x := -127
		if amax > 0 {
			x = max(-127, min(127, int(math.Round(math.Log2(amax/448)))))
		}
		xq.Scales[b] = uint8(x + 127)
		for i, v := range blk {
			xq.Codes[b*32+i] = mxfp.EncodeE4M3(float32(float64(v) * math.Ldexp(1, -x)))
		}
	}
	d := copyCase(c)
	d.Input.X, d.Input.XQ = nil, xq
	r, err := Compare(c, candidate(t, d), safetensors.F32, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Pass {
		t.Fatalf("x quantized with the exponent rounded to nearest passes (NRMSE %g)", r.NRMSE)
	}
	Diagnose(c, r)
	if best := r.Best(); best == nil || best.Name != "recipe_round" {
		t.Errorf("diagnosis first: %+v, want recipe_round matched", r.Diagnosis[0])
	}
}
