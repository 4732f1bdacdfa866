package cuda

import (
	"fmt"
	"reflect"
	"strings"
	"unicode"

	"kimimoe/activation"
)

// The ABI header: abi.go's constants and argument structs written as C,
// prepended to the kernels (KernelProgram).

// cName is a struct's C name: quantizeXArgs -> QuantizeXArgs.
func cName(t reflect.Type) string {
	n := []rune(t.Name())
	n[0] = unicode.ToUpper(n[0])
	return string(n)
}

// snake maps a Go field name to C: NEntries -> n_entries, W31S -> w31s.
func snake(s string) string {
	var b strings.Builder
	r := []rune(s)
	for i, c := range r {
		if unicode.IsUpper(c) && i > 0 && (unicode.IsLower(r[i-1]) || i+1 < len(r) && unicode.IsLower(r[i+1]) && unicode.IsUpper(r[i-1])) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}

func cField(f reflect.StructField) string {
	if n := f.Tag.Get("cname"); n != "" {
		return n
	}
	return snake(f.Name)
}

// cStruct renders t as a C struct with a static_assert on its size, taken
// from Go's layout.
func cStruct(t reflect.Type) string {
	var b strings.Builder
	name := cName(t)
	fmt.Fprintf(&b, "struct %s {\n", name)
	var next uintptr
	ints := false
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Offset != next {
			panic("cuda: ABI struct " + t.Name() + " has padding before " + f.Name)
		}
		next = f.Offset + f.Type.Size()
		if f.Type.Kind() == reflect.Uint64 && ints {
			panic("cuda: ABI struct " + t.Name() + ": pointer " + f.Name + " after an int32 field")
		}
		ints = ints || f.Type.Kind() == reflect.Int32
		var ct string
		switch f.Type.Kind() {
		case reflect.Uint64:
			ct = f.Tag.Get("c")
			if !strings.HasSuffix(ct, "*") {
				panic("cuda: ABI field " + t.Name() + "." + f.Name + " is a devptr without a c:\"T*\" tag")
			}
		case reflect.Int32:
			ct = "int"
		default:
			panic("cuda: ABI field " + t.Name() + "." + f.Name + " has unsupported type " + f.Type.String())
		}
		fmt.Fprintf(&b, "    %s %s;\n", ct, cField(f))
	}
	b.WriteString("};\n")
	fmt.Fprintf(&b, "static_assert(sizeof(%s) == %d, \"%s: Go and CUDA disagree on the size\");\n", name, t.Size(), name)
	return b.String()
}

// abiHeader is the C text prepended to the kernels.
func abiHeader() string {
	var b strings.Builder
	b.WriteString("// Generated from backend/cuda/abi.go: the kernel ABI. Do not edit.\n")
	b.WriteString("typedef unsigned char u8;\ntypedef unsigned short u16;\ntypedef unsigned int u32;\n")
	all := append([]pathProgram{shared}, programs[:]...)
	for _, p := range all {
		for _, d := range p.defines {
			fmt.Fprintf(&b, "#define KMOE_%s %d\n", d.name, d.v)
		}
	}
	for i, p := range abiParams {
		fmt.Fprintf(&b, "#define KMOE_PARAM_%s %d\n", p.name, i)
	}
	for _, k := range activation.Kinds() {
		fmt.Fprintf(&b, "#define KMOE_ACT_%s %d\n", strings.ToUpper(k.String()), activationCode(k))
	}
	b.WriteString(tileConstants())
	for _, p := range all {
		for _, t := range p.structs {
			b.WriteString(cStruct(t))
		}
	}
	b.WriteString("// End of the generated ABI.\n")
	return b.String()
}

// tileConstants are the per-tile constants of the tiled loops as C++
// specializations, one for each tile an instance runs at: a kernel
// instantiated for a tile that has none fails the compile instead of
// taking another tile's values, and a table here without a tile the
// instances list panics (every test that builds the program sees it).
func tileConstants() string {
	var b strings.Builder
	at := func(table string, m map[int]int, t int) int {
		v, ok := m[t]
		if !ok {
			panic(fmt.Sprintf("cuda: %s has no entry for the %d tile", table, t))
		}
		return v
	}
	family := func(name, doc string, tiles []int, fields []string, vals func(t int) []int) {
		fmt.Fprintf(&b, "// %s\ntemplate <int T> struct %s;\n", doc, name)
		for _, t := range tiles {
			v := vals(t)
			parts := make([]string, len(fields))
			for i, f := range fields {
				parts[i] = fmt.Sprintf("%s = %d", f, v[i])
			}
			fmt.Fprintf(&b, "template <> struct %s<%d> { static constexpr int %s; };\n", name, t, strings.Join(parts, ", "))
		}
	}
	family("F4Tile", "The wgmma-fp4 loop per tile of T tokens: f4Stages, f4Ahead, f4Smem.", f4Tiles,
		[]string{"stages", "ahead", "smem"}, func(t int) []int {
			return []int{at("f4Stages", f4Stages, t), at("f4Ahead", f4Ahead, t), f4Smem(t)}
		})
	family("F4SyncTile", "The mma.sync loop per tile of T tokens: f4sWinK, f4sAhead, f4sBlocks, f4sSmem.", f4sTiles,
		[]string{"win_k", "ahead", "blocks", "smem"}, func(t int) []int {
			return []int{at("f4sWinK", f4sWinK, t), at("f4sAhead", f4sAhead, t), at("f4sBlocks", f4sBlocks, t), f4sSmem(t)}
		})
	family("WgTile", "The wgmma path per tile of T weight rows: wgStages, wgSmem.", wgRows,
		[]string{"stages", "smem"}, func(t int) []int { return []int{at("wgStages", wgStages, t), wgSmem(t)} })
	return b.String()
}
