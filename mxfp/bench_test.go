package mxfp

import (
	"math/rand/v2"
	"testing"
)

// benchMatrix is the Kimi prefill activation shape [8192, 3584], random
// normal values: zeros take the short way through the block scale (amax
// 0) and would time a path real activations never take.
func benchMatrix() (rows, cols int, src []float32) {
	rows, cols = 8192, 3584
	rng := rand.New(rand.NewPCG(1, 2))
	src = make([]float32, rows*cols)
	for i := range src {
		src[i] = float32(rng.NormFloat64())
	}
	return
}

func BenchmarkQuantizeMXFP8(b *testing.B) {
	rows, cols, src := benchMatrix()
	for _, r := range []Recipe{RecipeRCeil, RecipeFloor} {
		b.Run(r.String(), func(b *testing.B) {
			m := NewMXFP8Matrix(rows, cols)
			b.SetBytes(int64(len(src) * 4))
			for b.Loop() {
				m.Quantize(src, r)
			}
			b.ReportMetric(float64(len(src))*float64(b.N)/b.Elapsed().Seconds()/1e6, "Melem/s")
		})
	}
}

func BenchmarkQuantizeMXFP4(b *testing.B) {
	rows, cols, src := benchMatrix()
	for _, r := range []Recipe{RecipeRCeil, RecipeFloor} {
		b.Run(r.String(), func(b *testing.B) {
			m := NewMXFP4Matrix(rows, cols)
			b.SetBytes(int64(len(src) * 4))
			for b.Loop() {
				m.Quantize(src, r)
			}
			b.ReportMetric(float64(len(src))*float64(b.N)/b.Elapsed().Seconds()/1e6, "Melem/s")
		})
	}
}
