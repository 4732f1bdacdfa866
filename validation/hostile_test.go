package validation

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kimimoe/safetensors"
)

// Hostile case files, each built by a helper, each with its own error, and
// each refused quickly and with little memory. Before: ep_size=0 was
// reported as an id out of range; an ep_size overflowing the global expert
// count gave rank 0's result; top-k 65536 over one expert with all ids 0
// (8.8 MB) needed ~32 GiB.
func TestHostileCaseFiles(t *testing.T) {
	ids := func(m, topk int, id int32) func(ts map[string]*safetensors.Tensor, md map[string]string) {
		return func(ts map[string]*safetensors.Tensor, md map[string]string) {
			v := make([]int32, m*topk)
			for i := range v {
				v[i] = id
			}
			w := make([]float32, m*topk)
			ts["topk_ids"] = safetensors.FromInt32("topk_ids", []int{m, topk}, v)
			ts["topk_weights"] = safetensors.FromFloat32("topk_weights", []int{m, topk}, w)
		}
	}
	cases := []struct {
		name, want string
		mutate     func(ts map[string]*safetensors.Tensor, md map[string]string)
	}{
		{"ep_size 0", "ep_size = 0", func(_ map[string]*safetensors.Tensor, md map[string]string) { md["ep_size"] = "0"; md["ep_rank"] = "0" }},
		{"ep_size overflow", "ep_size = 4611686018427387905", func(_ map[string]*safetensors.Tensor, md map[string]string) {
			md["ep_size"], md["ep_rank"] = "4611686018427387905", "4611686018427387904"
		}},
		{"top-k above the expert count", "top-k = 65536", ids(3, 65536, 0)},
		{"an expert twice in a token", "twice", ids(3, 2, 1)},
	}
	dir := t.TempDir()
	for _, c := range cases {
		path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_"))
		if err := os.WriteFile(path, rawFile(t, c.mutate), 0o644); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err := ReadCase(path)
		if !errors.Is(err, ErrCaseFile) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrCaseFile mentioning %q", c.name, err, c.want)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: refused after %v", c.name, d)
		}
	}
}

// FuzzCaseFile feeds whole case files through the reader's checks and, for
// the tiny ones it accepts, the oracle: nothing may panic, and an accepted
// case must run (its errors are input errors, not crashes). The seeds are
// a valid small case and a few broken ones.
func FuzzCaseFile(f *testing.F) {
	good := rawFile(f, func(map[string]*safetensors.Tensor, map[string]string) {})
	f.Add(good)
	f.Add(rawFile(f, func(_ map[string]*safetensors.Tensor, md map[string]string) { md["ep_size"] = "0" }))
	f.Add(rawFile(f, func(_ map[string]*safetensors.Tensor, md map[string]string) {
		md["chain"] = "exact"
		md["recipe"] = "floor"
	}))
	f.Add(good[:len(good)/2])
	f.Fuzz(func(t *testing.T, data []byte) {
		sf, err := safetensors.Parse(data)
		if err != nil {
			return
		}
		c, err := caseFromFile(sf)
		if err != nil {
			if !errors.Is(err, ErrCaseFile) {
				t.Fatalf("case error does not wrap ErrCaseFile: %v", err)
			}
			return
		}
		w := c.Weights
		if w.E*w.N*w.K > 1<<16 || c.Input.M*c.Input.TopK > 1<<10 {
			return // too large to run in a fuzz iteration
		}
		if _, err := c.OracleForward(nil); err != nil {
			t.Fatalf("accepted case fails in the oracle: %v", err)
		}
	})
}
