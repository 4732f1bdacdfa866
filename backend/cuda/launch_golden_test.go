//go:build cgo

package cuda

import (
	"flag"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"kimimoe/activation"
	"kimimoe/moe"
	"kimimoe/mxfp"
)

var update = flag.Bool("update", false, "rewrite testdata/launches.golden")

// The launches of a set of plans, run dry, are testdata/launches.golden:
// each launch's kernel argument type, grid, block, shared memory, PDL and
// every argument, pointers named by the buffer or weight they point into.
// A change that should issue the same launches (a refactor of the house)
// leaves the file as it is; one that changes a launch shows it in the
// diff, and `go test ./backend/cuda -run LaunchGolden -update` rewrites it.
func TestLaunchGolden(t *testing.T) {
	defer func() { dryRun = nil }()
	var out strings.Builder
	names := map[devptr]string{}
	next := devptr(1) << 40
	name := func(p *devptr, n string) {
		*p = next
		names[next] = n
		next += 1 << 32 // room for any offset into the buffer
	}
	nameOf := func(v devptr) string {
		if v == 0 {
			return "0"
		}
		n, ok := names[v&^(1<<32-1)]
		switch {
		case !ok:
			return fmt.Sprintf("%#x", v)
		case v&(1<<32-1) != 0:
			return fmt.Sprintf("%s+%d", n, v&(1<<32-1))
		}
		return n
	}
	ptrType := reflect.TypeFor[devptr]()
	dryRun = func(l dryLaunch) error {
		v := reflect.ValueOf(l.args).Elem()
		fmt.Fprintf(&out, "  %s", v.Type().Name())
		if _, memset := l.args.(*memset32Args); !memset {
			fmt.Fprintf(&out, " grid=%v block=%d smem=%d pdl=%v", l.grid, l.block, l.smem, l.pdl)
		}
		for i := range v.NumField() {
			f, fn := v.Field(i), v.Type().Field(i).Name
			if f.Type() == ptrType {
				fmt.Fprintf(&out, " %s=%s", fn, nameOf(devptr(f.Uint())))
			} else {
				fmt.Fprintf(&out, " %s=%v", fn, f)
			}
		}
		out.WriteString("\n")
		return nil
	}
	for _, s := range []struct {
		name          string
		k, n, e, topk int
		chain         moe.Chain
	}{{"kimi", 3584, 3072, 28, 16, moe.ChainMXFP8}, {"gpt-oss", 2880, 2880, 32, 4, moe.ChainMXFP8}, {"k160", 160, 96, 8, 4, moe.ChainFlashInfer}} {
		l := &Layer{b: &Backend{k: &kernels{}, sms: 132, arch: archs[0]}, w: &moe.Weights{K: s.k, N: s.n, E: s.e},
			spec: moe.LayerSpec{Activation: activation.Situ, Params: []activation.Params{activation.DefaultParams()}, Chain: s.chain, Recipe: mxfp.RecipeRCeil}}
		name(&l.params, "params")
		name(&l.b1, "b1")
		name(&l.b2, "b2")
		for p := range paths {
			l.avail[p] = paths[p].available(l) == ""
			for i, w := range paths[p].weights(l) {
				name(w, fmt.Sprintf("%v.w%d", Path(p), i))
			}
		}
		for _, tu := range []Tuning{{}, {FP4MaxM: -1}, {NoPDL: true, NoTileReady: true}, {FP4Tile: 256}} {
			l.tune = tu
			for _, m := range []int{1, 24, 192, 1025, 8192} {
				ws := &workspace{m: m, topk: s.topk, plans: [2]Plan{l.plan(m, s.topk, false), l.plan(m, s.topk, true)}}
				for _, b := range l.buffers(ws) {
					name(b.p, "ws."+wsFieldName(ws, b.p))
				}
				for _, wide := range []bool{false, true} {
					ws.wide = wide
					fmt.Fprintf(&out, "%s %v M=%d wide=%v: %s\n", s.name, tu, m, wide, ws.plan())
					for _, st := range l.steps(ws) {
						if err := st.run(); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
		}
	}
	const golden = "testdata/launches.golden"
	if *update {
		if err := os.WriteFile(golden, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test ./backend/cuda -run LaunchGolden -update writes it)", err)
	}
	got, wl := strings.Split(out.String(), "\n"), strings.Split(string(want), "\n")
	for i := range min(len(got), len(wl)) {
		if got[i] != wl[i] {
			t.Fatalf("%s line %d:\n got %s\nwant %s\n(-update rewrites it if the change is meant)", golden, i+1, got[i], wl[i])
		}
	}
	if len(got) != len(wl) {
		t.Fatalf("%d lines, %s has %d", len(got), golden, len(wl))
	}
}

// wsFieldName is the name of ws's field that p points to.
func wsFieldName(ws *workspace, p *devptr) string {
	v := reflect.ValueOf(ws).Elem()
	for i := range v.NumField() {
		if unsafe.Pointer(v.Field(i).UnsafeAddr()) == unsafe.Pointer(p) {
			return v.Type().Field(i).Name
		}
	}
	panic("cuda: not a field of the workspace")
}
