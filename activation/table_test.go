package activation

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// The table's own invariants: rows in Kind order, names and FlashInfer
// values unique, every parameter a kind reads known, every formula set.
func TestTableIsConsistent(t *testing.T) {
	seen := map[string]Kind{}
	fi := map[int]Kind{}
	for i, r := range table {
		if r.Kind != Gelu+Kind(i) {
			t.Errorf("row %d holds %v: rows must be in Kind order", i, r.Kind)
		}
		if r.eval == nil || r.eval32 == nil {
			t.Errorf("%v has no formula", r.Kind)
		}
		for _, n := range r.Names {
			if n != strings.ToLower(n) {
				t.Errorf("%v: name %q is not lower case (ParseKind lowers its input)", r.Kind, n)
			}
			if o, dup := seen[n]; dup {
				t.Errorf("name %q is both %v's and %v's", n, o, r.Kind)
			}
			seen[n] = r.Kind
		}
		if o, dup := fi[r.FlashInfer]; dup && r.FlashInfer >= 0 {
			t.Errorf("FlashInfer value %d is both %v's and %v's", r.FlashInfer, o, r.Kind)
		}
		fi[r.FlashInfer] = r.Kind
		for _, n := range r.Params {
			if _, ok := ParamByName(n); !ok {
				t.Errorf("%v reads the unknown parameter %q", r.Kind, n)
			}
		}
	}
	for _, q := range AllParams() {
		if q.Doc == "" {
			t.Errorf("parameter %q has no doc", q.Name)
		}
	}
	if q, ok := ParamByName("situ_linear_beta"); !ok || q.Flag() != "situ-linear-beta" {
		t.Errorf("situ_linear_beta: %v, flag %q", ok, q.Flag())
	}
}

// A new kind is one row of the table (with its formulas): parsing,
// naming, gatedness, its parameters' checks, evaluation, the kind list and
// the Python table all follow from it. The throwaway kind has no FlashInfer
// value, which the kinds' own codes allow.
func TestANewKindIsOneRow(t *testing.T) {
	saved := table
	defer func() { table = saved }()
	k := Gelu + Kind(len(table))
	table = append(slices.Clip(table), Info{Kind: k, Names: []string{"throwaway", "tw_alias"}, Gated: true,
		Params: []string{"swiglu_limit"}, FlashInfer: -1,
		eval:   func(p *Params, g, u float64) float64 { return math.Min(g, p.SwigluLimit) * u },
		eval32: func(p *Params, g, u float32) float32 { return min32(g, float32(p.SwigluLimit)) * u }})
	if got, err := ParseKind("TW_ALIAS"); err != nil || got != k || k.String() != "throwaway" || !k.Valid() || !k.IsGated() {
		t.Fatalf("ParseKind: %v, %v; %q valid %v gated %v", got, err, k, k.Valid(), k.IsGated())
	}
	if k.FlashInferABI() != -1 || !slices.Contains(Kinds(), k) {
		t.Errorf("FlashInfer value %d, in Kinds %v", k.FlashInferABI(), slices.Contains(Kinds(), k))
	}
	p := DefaultParams()
	if Eval(k, &p, 9, 2) != 14 || Eval32(k, &p, 9, 2) != 14 {
		t.Errorf("Eval = %v, Eval32 = %v, want 14", Eval(k, &p, 9, 2), Eval32(k, &p, 9, 2))
	}
	p.SwigluLimit = -1
	if err := p.Validate(k); err == nil || !strings.Contains(err.Error(), "swiglu_limit") {
		t.Errorf("Validate with a negative limit: %v", err)
	}
	p = DefaultParams()
	p.SituBeta = -1 // a parameter it does not read
	if err := p.Validate(k); err != nil {
		t.Errorf("Validate checks a parameter the kind does not read: %v", err)
	}
	if !strings.Contains(pythonTable(), `"throwaway": (("tw_alias",), True, ("swiglu_limit",), None),`) {
		t.Errorf("the Python table lacks the new kind:\n%s", pythonTable())
	}
}
