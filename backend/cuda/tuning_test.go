package cuda

import (
	"errors"
	"strings"
	"testing"

	"kimimoe/backend"
)

// ParseTuning reads every key, String writes what it read, and a typo, a
// bad value, a repeated key or a 0 (the policy is the key left out) is an
// error naming it: a mistyped override must not time the policy silently.
func TestParseTuning(t *testing.T) {
	all := "decode-max-m=-1,fp4-max-m=512,wgmma-min-m=1,wgmma=off,fp4-tile=48,fp4-fit-max-m=-1,fp4-act-min-m=1," +
		"fp4-act-max-m=100000,act-by-tile-max-m=-1,act-ctas-sm=5,route-many-max-m=-1,fp4-sync=off,pdl=off,tile-ready=off,flush=write"
	tu, err := ParseTuning(all)
	want := Tuning{DecodeMaxM: -1, FP4MaxM: 512, WGMMAMinM: 1, NoWGMMA: true, FP4Tile: 48, FP4FitMaxM: -1, FP4ActMinM: 1,
		FP4ActMaxM: 100000, ActByTileMaxM: -1, ActCTAsSM: 5, RouteManyMaxM: -1, NoFP4Sync: true, NoPDL: true, NoTileReady: true, Flush: FlushWrite}
	if err != nil || tu != want {
		t.Fatalf("ParseTuning(every key) = %+v, %v", tu, err)
	}
	if tu.String() != all {
		t.Errorf("String() = %q, want %q", tu.String(), all)
	}
	if tu, err := ParseTuning(" flush = none , "); err != nil || tu != (Tuning{Flush: FlushNone}) {
		t.Errorf("spaces and a trailing comma: %+v, %v", tu, err)
	}
	if tu, err := ParseTuning(""); err != nil || tu != (Tuning{}) || tu.String() != "" {
		t.Errorf("the empty string: %+v, %v", tu, err)
	}
	for _, bad := range []string{"fp4-maxm=1", "fp4-max-m", "fp4-max-m=0", "fp4-max-m=-2", "fp4-max-m=x", "pdl=no",
		"flush=0", "fp4-tile=40", "act-ctas-sm=-1", "decode-max-m=1,decode-max-m=2",
		"act-ctas-sm=4611686018427387904", "act-ctas-sm=33", "w3-spare-max=101", "w3-spare-max=9223372036854775807", "fp4-max-m=1073741825"} {
		_, err := ParseTuning(bad)
		if !errors.Is(err, backend.ErrUnsupported) || !strings.Contains(err.Error(), strings.SplitN(strings.SplitN(bad, ",", 2)[0], "=", 2)[0]) &&
			!strings.Contains(err.Error(), "tile") {
			t.Errorf("ParseTuning(%q): %v", bad, err)
		}
	}
	// Each flush names itself in bench's output differently.
	seen := map[string]bool{}
	for _, f := range []Flush{FlushRead, FlushWrite, FlushNone} {
		if seen[f.String()] {
			t.Errorf("flush %d's description %q is another's", f, f)
		}
		seen[f.String()] = true
	}
}
