package cuda

import (
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"kimimoe/activation"
)

// The ABI header defines every KMOE_* macro the kernels use (but the
// compile option KMOE_NATIVE_MX), and no activation number is written in
// the kernels by hand. This runs everywhere (no GPU, no NVRTC).
func TestKernelsUseOnlyABIMacros(t *testing.T) {
	header := abiHeader()
	defined := map[string]bool{"KMOE_NATIVE_MX": true}
	for _, m := range regexp.MustCompile(`#define (KMOE_\w+)`).FindAllStringSubmatch(header, -1) {
		defined[m[1]] = true
	}
	for _, m := range regexp.MustCompile(`\bKMOE_[A-Z0-9_]*[A-Z0-9]\b`).FindAllString(kernelSource, -1) {
		if !defined[m] {
			t.Errorf("the kernels use %s, which abi.go does not define", m)
		}
	}
	if regexp.MustCompile(`case [0-9]+:`).MatchString(kernelSource) {
		t.Error("the kernels have a numeric case label: use the KMOE_ACT_* codes")
	}
	// Every gated kind of the activation table has a case in the kernels,
	// under its own Kind value.
	for _, k := range activation.Kinds() {
		if !k.IsGated() {
			continue
		}
		macro := "KMOE_ACT_" + strings.ToUpper(k.String())
		if !strings.Contains(kernelSource, "case "+macro+":") {
			t.Errorf("the kernels do not handle %s", macro)
		}
		if !strings.Contains(header, "#define "+macro+" "+itoa(int(k))+"\n") {
			t.Errorf("header: %s is not the Kind's value %d", macro, int(k))
		}
	}
}

// Every kernel the host launches exists in the kernels with the argument
// struct abi.go says, taken by value, and nothing else is an entry point.
func TestKernelEntryPointsMatchABI(t *testing.T) {
	entry := regexp.MustCompile(`extern "C" __global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)\(const (\w+) a\)`)
	found := map[string]string{}
	for _, m := range entry.FindAllStringSubmatch(kernelSource, -1) {
		found[m[1]] = m[2]
	}
	if n := strings.Count(kernelSource, `extern "C" __global__`); n != len(found) {
		t.Errorf("%d entry points, %d of them take one ABI struct", n, len(found))
	}
	var names []string
	for _, k := range kernelSpecs {
		names = append(names, k.name)
		if got, ok := found[k.name]; !ok || got != cName(k.args) {
			t.Errorf("%s: the kernels have it taking %q, abi.go says %s", k.name, got, cName(k.args))
		}
	}
	for n := range found {
		if !slices.Contains(names, n) {
			t.Errorf("entry point %s is not in abi.go's kernelSpecs", n)
		}
	}
}

// The generated structs: the size is asserted from Go's layout, and C
// names follow the Go field names.
func TestABIStructs(t *testing.T) {
	c := cStruct(reflect.TypeFor[gemm2Args]())
	for _, want := range []string{
		"struct Gemm2Args {", "    const u8* aq;", "    float* y;", "    int e_local;",
		"static_assert(sizeof(Gemm2Args) == " + itoa(int(unsafe.Sizeof(gemm2Args{}))) + ",",
	} {
		if !strings.Contains(c, want) {
			t.Errorf("cStruct(gemm2Args) lacks %q:\n%s", want, c)
		}
	}
	for in, want := range map[string]string{"NEntries": "n_entries", "W31S": "w31s", "TileBase": "tile_base", "TopK": "top_k", "XQ": "xq", "K": "k"} {
		if got := snake(in); got != want {
			t.Errorf("snake(%q) = %q, want %q", in, got, want)
		}
	}
	// Parameters are packed in the header's KMOE_PARAM_* order.
	p := activation.DefaultParams()
	p.SituBeta, p.SwigluLimit = 4, 9
	got := packParams([]activation.Params{p})
	if len(got) != abiParamStride || got[0] != 4 || got[4] != 9 {
		t.Errorf("packParams = %v", got)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// maxTiles is the most token tiles any routing of the entries can make:
// never below the largest sum of ceil(count / tt) over experts (or a CTA
// row would miss a tile), and reached by some routing (so the grid holds
// no row that no routing fills), by a search over every split of the
// entries among the experts, for small counts.
func TestMaxTiles(t *testing.T) {
	for _, tt := range []int{1, 2, 3, 8, 16} {
		for e := 1; e <= 8; e++ {
			// best[n] = the most tiles n entries make over the experts so far.
			best := make([]int, 41)
			for range e {
				next := make([]int, len(best))
				for n := range best {
					for c := 0; c <= n; c++ {
						next[n] = max(next[n], best[n-c]+(c+tt-1)/tt)
					}
				}
				best = next
			}
			for n := 1; n < len(best); n++ {
				if got := maxTiles(n, e, tt); got != best[n] {
					t.Errorf("maxTiles(%d entries, %d experts, tile %d) = %d, the most a routing makes is %d", n, e, tt, got, best[n])
				}
			}
		}
	}
}
