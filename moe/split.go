package moe

import "fmt"

// Experts returns a view of local experts [lo, hi) of w: the buffers are
// sub-slices of w's (no copy), so w must not change while the view is in
// use. It panics if the range is outside [0, E) or empty.
func (w *Weights) Experts(lo, hi int) *Weights {
	if lo < 0 || hi > w.E || lo >= hi {
		panic(fmt.Sprintf("moe: Experts(%d, %d) of %d experts", lo, hi, w.E))
	}
	r := w.Rows()
	p31, s31 := r*w.K/2, r*w.K/32
	p2, s2 := w.K*w.N/2, w.K*w.N/32
	v := &Weights{E: hi - lo, N: w.N, K: w.K, Gated: w.Gated,
		W31: w.W31[lo*p31 : hi*p31], W31Scale: w.W31Scale[lo*s31 : hi*s31],
		W2: w.W2[lo*p2 : hi*p2], W2Scale: w.W2Scale[lo*s2 : hi*s2]}
	if w.W31Bias != nil {
		v.W31Bias = w.W31Bias[lo*r : hi*r]
	}
	if w.W2Bias != nil {
		v.W2Bias = w.W2Bias[lo*w.K : hi*w.K]
	}
	return v
}

// SplitDevices spreads one EP rank's layer over d devices. Device i holds
// local experts [i*E/d, (i+1)*E/d) of w, which makes it EP rank
// Rank*d + i of Size*d: its experts keep their global ids, so the same
// top-k ids route to it, and the d partial outputs sum to the layer's
// output (each token's slots are split among the devices; their sums over
// slots differ from the one-device sum only by the order of additions).
// Per-expert activation parameters are split with the experts. The
// weights are views of w (Experts). Errors wrap ErrParallel: d < 1, E not
// divisible by d, or a global expert count that overflows.
func SplitDevices(w *Weights, spec LayerSpec, d int) ([]*Weights, []LayerSpec, error) {
	if err := spec.Validate(w); err != nil {
		return nil, nil, err
	}
	if d < 1 {
		return nil, nil, fmt.Errorf("%w: %d devices: want at least 1", ErrParallel, d)
	}
	if w.E%d != 0 {
		return nil, nil, fmt.Errorf("%w: %d local experts do not divide over %d devices", ErrParallel, w.E, d)
	}
	ep := spec.EP.Normalize()
	if ep.Size > MaxGlobalExperts/d {
		return nil, nil, fmt.Errorf("%w: ep_size %d x %d devices overflows", ErrParallel, ep.Size, d)
	}
	each := w.E / d
	ws := make([]*Weights, d)
	specs := make([]LayerSpec, d)
	for i := range d {
		ws[i] = w.Experts(i*each, (i+1)*each)
		s := spec
		s.EP = EP{Size: ep.Size * d, Rank: ep.Rank*d + i}
		if len(spec.Params) != 1 {
			s.Params = spec.Params[i*each : (i+1)*each]
		}
		if _, err := s.EP.NumGlobal(each); err != nil {
			return nil, nil, err
		}
		specs[i] = s
	}
	return ws, specs, nil
}
