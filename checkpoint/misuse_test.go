package checkpoint

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"kimimoe/moe"
)

// openLoad opens dir and loads layer 0 with opts.
func openLoad(t *testing.T, dir string, opts Options) error {
	t.Helper()
	ck, err := Open(dir)
	if err != nil {
		return err
	}
	defer ck.Close()
	_, err = ck.Load(opts)
	return err
}

// sparseShard writes a shard whose header declares entries {name: shape}
// of U8 (one byte an element) and whose data is a hole: gigabytes on paper,
// a few bytes on disk.
func sparseShard(t *testing.T, path string, entries [][2]any) {
	t.Helper()
	header := map[string]any{}
	var off int64
	for _, e := range entries {
		shape := e[1].([]int)
		n := int64(1)
		for _, d := range shape {
			n *= int64(d)
		}
		header[e[0].(string)] = map[string]any{"dtype": "U8", "shape": shape, "data_offsets": []int64{off, off + n}}
		off += n
	}
	h, _ := json.Marshal(header)
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(h)))
	f.Write(n[:])
	f.Write(h)
	must(t, f.Truncate(int64(8+len(h))+off))
	f.Close()
}

// GPT-OSS layouts with K = 0 or no experts are errors naming the tensor
// (K = 0 passed the loader and panicked dividing by zero in the forward).
func TestGPTOSSDegenerateShapes(t *testing.T) {
	p := "model.layers.0.mlp.experts."
	for _, c := range []struct {
		name      string
		e, n2, kb int
		want      string
	}{
		{"K = 0", 2, 128, 0, "N=64 and K=0 must be positive multiples of 32"},
		{"no experts", 0, 128, 3, "the stacked tensors hold no experts"},
	} {
		dir := t.TempDir()
		sparseShard(t, filepath.Join(dir, "model.safetensors"), [][2]any{{p + "gate_up_proj_blocks", []int{c.e, c.n2, c.kb, 16}}})
		if err := openLoad(t, dir, Options{}); !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// A layer whose headers declare more than Options.MaxBytes is refused
// before anything is allocated or read (a 2.2 GB sparse shard reached 6.6
// GB of memory before the limit, checked after loading, refused it).
func TestLoadBudgetFromHeaders(t *testing.T) {
	p := "model.layers.0.mlp.experts."
	dir := t.TempDir()
	e, n, k := 32, 2880, 2880
	sparseShard(t, filepath.Join(dir, "model.safetensors"), [][2]any{
		{p + "gate_up_proj_blocks", []int{e, 2 * n, k / 32, 16}}, {p + "gate_up_proj_scales", []int{e, 2 * n, k / 32}},
		{p + "down_proj_blocks", []int{e, k, n / 32, 16}}, {p + "down_proj_scales", []int{e, k, n / 32}},
	})
	err := openLoad(t, dir, Options{MaxBytes: 64 << 20})
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "32 experts") {
		t.Fatalf("%v, want ErrTooLarge", err)
	}
}

// An index naming 50,000 experts is refused by the budget before the
// loader allocates for them (a 10^6-expert index took 6.4 GB).
func TestHugeIndexBudget(t *testing.T) {
	w := source(t)
	w.W31Bias, w.W2Bias = nil, nil
	dir := t.TempDir()
	must(t, Write(dir, FormatKimi, w, 0, 1))
	wm := map[string]string{}
	for e := range 50000 {
		wm[fmt.Sprintf("language_model.model.layers.0.mlp.experts.%d.w1.weight_packed", e)] = "model-00001-of-00001.safetensors"
	}
	data, _ := json.Marshal(map[string]any{"weight_map": wm})
	must(t, os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), data, 0o644))
	if err := openLoad(t, dir, Options{MaxBytes: 16 << 20}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("%v, want ErrTooLarge", err)
	}
}

// A duplicate key in weight_map is an error (encoding/json kept the last).
func TestIndexDuplicateKey(t *testing.T) {
	w := source(t)
	w.W31Bias, w.W2Bias = nil, nil
	dir := t.TempDir()
	must(t, Write(dir, FormatKimi, w, 0, 2))
	name := "model.layers.0.mlp.experts.0.w1.weight_packed"
	idx := `{"metadata": {}, "weight_map": {"` + name + `": "model-00001-of-00002.safetensors", "` + name + `": "model-00002-of-00002.safetensors"}}`
	must(t, os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(idx), 0o644))
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "names tensor \""+name+"\" twice") {
		t.Errorf("%v", err)
	}
}

// A layer holding both layouts is an error naming both (it took whichever
// sorted first).
func TestLayerWithBothLayouts(t *testing.T) {
	w := source(t)
	dir := t.TempDir()
	ts := append(kimiTensors(w, 0, "mlp"), gptossTensors(w, 0)...)
	must(t, writeShards(dir, ts, 0))
	err := openLoad(t, dir, Options{})
	if err == nil || !strings.Contains(err.Error(), "both a Kimi-K3 and a GPT-OSS expert set") {
		t.Errorf("%v", err)
	}
}

// Load after Close is ErrClosed (it panicked on a nil map); Loads from
// several goroutines are safe (a map written while read was fatal).
func TestCheckpointCloseAndConcurrency(t *testing.T) {
	w := source(t)
	dir := t.TempDir()
	must(t, Write(dir, FormatGPTOSS, w, 0, 2))
	ck, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := ck.Load(Options{}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	ck.Close()
	if _, err := ck.Load(Options{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Load after Close: %v", err)
	}
}

// Options and Write arguments that make no sense are errors, not a
// silent default or a panic.
func TestBadOptionsAndWriteArgs(t *testing.T) {
	w := source(t)
	dir := t.TempDir()
	must(t, Write(dir, FormatGPTOSS, w, 0, 1))
	for _, o := range []Options{{MoETPSize: -1}, {EP: moe.EP{Size: 0, Rank: 3}}, {Layer: -1}} {
		if err := openLoad(t, dir, o); err == nil {
			t.Errorf("Options %+v loaded", o)
		}
	}
	if err := Write(t.TempDir(), FormatKimi, w, 0, -1); err == nil || !strings.Contains(err.Error(), "-1 shards") {
		t.Errorf("shards -1: %v", err)
	}
	empty := *w
	empty.E, empty.W31, empty.W31Scale, empty.W2, empty.W2Scale, empty.W31Bias, empty.W2Bias = 0, nil, nil, nil, nil, nil, nil
	if err := Write(t.TempDir(), FormatKimi, &empty, 0, 0); err == nil {
		t.Error("weights with no experts written")
	}
	if err := Write(t.TempDir(), FormatKimi, nil, 0, 0); err == nil {
		t.Error("nil weights written")
	}
}

// FuzzCheckpointDir builds a whole checkpoint directory from the fuzzer's
// bytes (an index and one shard, or a lone model.safetensors) and runs it
// through Open, Load and, when it loads, the oracle on two tokens: nothing
// may panic, hang or allocate past the budget.
func FuzzCheckpointDir(f *testing.F) {
	for _, format := range []Format{FormatKimi, FormatGPTOSS} {
		w := moe.NewWeights(2, 32, 32, true) // small seeds keep the fuzzer fast
		for i := range w.W31 {
			w.W31[i] = uint8(i * 37)
		}
		for i := range w.W2 {
			w.W2[i] = uint8(i * 11)
		}
		for _, sc := range [][]uint8{w.W31Scale, w.W2Scale} {
			for i := range sc {
				sc[i] = 120
			}
		}
		if format == FormatGPTOSS {
			w.W31Bias, w.W2Bias = make([]float32, 2*64), make([]float32, 2*32)
		}
		dir := f.TempDir()
		must(f, Write(dir, format, w, 0, 1))
		index, _ := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json"))
		shard, _ := os.ReadFile(filepath.Join(dir, "model-00001-of-00001.safetensors"))
		f.Add(index, shard)
		f.Add([]byte{}, shard)
	}
	f.Fuzz(func(t *testing.T, index, shard []byte) {
		dir := t.TempDir()
		name := "model.safetensors"
		if len(index) > 0 {
			name = "model-00001-of-00001.safetensors"
			must(t, os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), index, 0o644))
		}
		must(t, os.WriteFile(filepath.Join(dir, name), shard, 0o644))
		ck, err := Open(dir)
		if err != nil {
			return
		}
		defer ck.Close()
		l, err := ck.Load(Options{Layer: 0, MaxBytes: 64 << 20})
		if err != nil {
			return
		}
		w := l.Weights
		if w.E*w.Rows()*w.K > 1<<20 {
			return // the oracle on a large layer is slow, not wrong
		}
		o, err := moe.NewOracle(w, l.Spec)
		if err != nil {
			return
		}
		in := &moe.Input{M: 2, TopK: 1, X: make([]float32, 2*w.K), TopKIDs: []int32{0, int32(l.NumExperts - 1)}, TopKWeights: []float32{1, 0.5}}
		out := make([]float64, 2*w.K)
		if err := o.Forward(out, in, nil); err != nil {
			t.Fatalf("a loaded layer's forward: %v", err)
		}
	})
}
