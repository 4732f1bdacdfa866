package moe

import (
	"reflect"
	"sync"
)

// Memo keeps expert outputs, one token through one local expert before
// its routing weight, computed by oracles of one layer's weights and spec:
// their later forwards on the same x reuse them whatever the routing. It
// holds K float64s a token and local expert it has seen, and nothing of
// the decoded weights.
type Memo struct {
	w    *Weights
	spec LayerSpec
	mu   sync.Mutex
	y    map[memoKey][]float64
}

// memoKey names a token's x by the slice it lies in: the memo takes x as
// unchanged between forwards.
type memoKey struct {
	x     *float32
	codes *uint8
	t, e  int
}

func keyOf(in *Input, t, e int) memoKey {
	k := memoKey{t: t, e: e}
	if in.XQ != nil {
		k.codes = &in.XQ.Codes[0]
	} else {
		k.x = &in.X[0]
	}
	return k
}

// WithMemo returns an oracle for o's weights and spec (sharing o's
// decoded experts) that reads and fills m: it reuses an expert output m
// holds in any later forward on the same x (the same slice, unchanged),
// whatever its routing (ids, weights, rows). A nil m, or one made for
// other weights (any other slice) or another spec, is replaced by a new
// Memo. Oracles Derive makes from it share the memo when their weights
// and spec are o's, and keep none otherwise. The outputs are the same
// bits as without a memo.
func (o *Oracle) WithMemo(m *Memo) *Oracle {
	d := *o
	if !m.madeFor(o.w, o.spec) {
		m = &Memo{w: o.w, spec: o.spec, y: map[memoKey][]float64{}}
	}
	d.memo = m
	return &d
}

// Memo returns the memo WithMemo gave o, or nil.
func (o *Oracle) Memo() *Memo { return o.memo }

// madeFor reports whether m (nil: no) holds outputs of w's slices under
// spec.
func (m *Memo) madeFor(w *Weights, spec LayerSpec) bool {
	return m != nil && w != nil && sameWeights(m.w, w) && reflect.DeepEqual(m.spec, spec)
}
