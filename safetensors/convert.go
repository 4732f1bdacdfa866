package safetensors

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/x448/float16"

	"kimimoe/internal/round"
)

// Typed views. Each checks the dtype and returns a fresh slice decoded from
// little-endian bytes (Uint8s aliases the data instead).

func (t *Tensor) want(d DType) error {
	if t.DType != d {
		return fmt.Errorf("%w: tensor %q has dtype %s, want %s", ErrFormat, t.Name, t.DType, d)
	}
	return t.sized()
}

// sized checks that the data holds exactly the shape's elements: a Tensor
// built by hand may disagree, and a view of it would be silently short.
func (t *Tensor) sized() error {
	if want := t.NumElements() * t.DType.Size(); want < 0 || len(t.Data) != want {
		return fmt.Errorf("%w: tensor %q: %d data bytes, shape %v of %s needs %d", ErrFormat, t.Name, len(t.Data), t.Shape, t.DType, want)
	}
	return nil
}

// mustShape panics if shape does not hold n elements: a programmer error
// in building a tensor.
func mustShape(name string, shape []int, n int) {
	count := 1
	for _, d := range shape {
		if d < 0 {
			count = -1
			break
		}
		count *= d
	}
	if count != n {
		panic(fmt.Sprintf("safetensors: tensor %q: shape %v for %d values", name, shape, n))
	}
}

// Uint8s returns the data of a U8 tensor (aliased, not copied).
func (t *Tensor) Uint8s() ([]uint8, error) {
	if err := t.want(U8); err != nil {
		return nil, err
	}
	return t.Data, nil
}

// Uint16s decodes a U16 (or, with raw bits, BF16/F16) tensor.
func (t *Tensor) Uint16s() ([]uint16, error) {
	if t.DType != U16 && t.DType != BF16 && t.DType != F16 {
		return nil, t.want(U16)
	}
	if err := t.sized(); err != nil {
		return nil, err
	}
	out := make([]uint16, len(t.Data)/2)
	for i := range out {
		out[i] = binary.LittleEndian.Uint16(t.Data[2*i:])
	}
	return out, nil
}

// Float32s decodes an F32 tensor.
func (t *Tensor) Float32s() ([]float32, error) {
	if err := t.want(F32); err != nil {
		return nil, err
	}
	out := make([]float32, len(t.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
	}
	return out, nil
}

// Float64s decodes an F64 tensor.
func (t *Tensor) Float64s() ([]float64, error) {
	if err := t.want(F64); err != nil {
		return nil, err
	}
	out := make([]float64, len(t.Data)/8)
	for i := range out {
		out[i] = math.Float64frombits(binary.LittleEndian.Uint64(t.Data[8*i:]))
	}
	return out, nil
}

// Int64s decodes an I32 or I64 tensor, widening I32.
func (t *Tensor) Int64s() ([]int64, error) {
	if t.DType == I32 || t.DType == I64 {
		if err := t.sized(); err != nil {
			return nil, err
		}
	}
	switch t.DType {
	case I32:
		out := make([]int64, len(t.Data)/4)
		for i := range out {
			out[i] = int64(int32(binary.LittleEndian.Uint32(t.Data[4*i:])))
		}
		return out, nil
	case I64:
		out := make([]int64, len(t.Data)/8)
		for i := range out {
			out[i] = int64(binary.LittleEndian.Uint64(t.Data[8*i:]))
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: tensor %q has dtype %s, want I32 or I64", ErrFormat, t.Name, t.DType)
}

// The From* constructors panic if shape does not hold len(v) elements.

// FromFloat32 builds an F32 tensor.
func FromFloat32(name string, shape []int, v []float32) *Tensor {
	mustShape(name, shape, len(v))
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return &Tensor{Name: name, DType: F32, Shape: shape, Data: b}
}

// FromFloat64 builds an F64 tensor.
func FromFloat64(name string, shape []int, v []float64) *Tensor {
	mustShape(name, shape, len(v))
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x))
	}
	return &Tensor{Name: name, DType: F64, Shape: shape, Data: b}
}

// FromUint16 builds a tensor of 2-byte elements (U16, BF16 or F16 bits).
func FromUint16(name string, d DType, shape []int, v []uint16) *Tensor {
	mustShape(name, shape, len(v))
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], x)
	}
	return &Tensor{Name: name, DType: d, Shape: shape, Data: b}
}

// FromInt32 builds an I32 tensor.
func FromInt32(name string, shape []int, v []int32) *Tensor {
	mustShape(name, shape, len(v))
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return &Tensor{Name: name, DType: I32, Shape: shape, Data: b}
}

// FromUint8 builds a U8 tensor over v (not copied).
func FromUint8(name string, shape []int, v []uint8) *Tensor {
	mustShape(name, shape, len(v))
	return &Tensor{Name: name, DType: U8, Shape: shape, Data: v}
}

// AsFloat32 decodes an F32, BF16 or F16 tensor to float32 (widening BF16
// and F16 exactly; F16 through github.com/x448/float16).
func (t *Tensor) AsFloat32() ([]float32, error) {
	switch t.DType {
	case F32:
		return t.Float32s()
	case BF16, F16:
		bits, err := t.Uint16s()
		if err != nil {
			return nil, err
		}
		out := make([]float32, len(bits))
		for i, b := range bits {
			if t.DType == BF16 {
				out[i] = round.Float32FromBF16(b)
			} else {
				out[i] = float16.Frombits(b).Float32()
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: tensor %q has dtype %s, want F32, BF16 or F16", ErrFormat, t.Name, t.DType)
}

// FromFloat32As builds an F32, BF16 or F16 tensor from v, rounding to
// nearest even for BF16 and F16 (F16: IEEE binary16 through
// github.com/x448/float16, overflow to infinity; BF16: round.BF16FromFloat32).
func FromFloat32As(name string, d DType, shape []int, v []float32) (*Tensor, error) {
	switch d {
	case F32:
		return FromFloat32(name, shape, v), nil
	case BF16, F16:
		bits := make([]uint16, len(v))
		for i, x := range v {
			if d == BF16 {
				bits[i] = round.BF16FromFloat32(x)
			} else {
				bits[i] = float16.Fromfloat32(x).Bits()
			}
		}
		return FromUint16(name, d, shape, bits), nil
	}
	return nil, fmt.Errorf("safetensors: tensor %q: cannot write dtype %s (want F32, BF16 or F16)", name, d)
}

// RoundFloat64 rounds x once, to nearest even, to the precision of d (F32,
// BF16 or F16; F64 returns x) and returns the rounded value. The BF16 and
// F16 roundings go through float32 by round-to-odd
// (round.Float32RoundToOdd), which is exact for a single rounding.
func RoundFloat64(x float64, d DType) float64 {
	switch d {
	case F32:
		return float64(float32(x))
	case BF16:
		return float64(round.Float32FromBF16(round.BF16FromFloat32(round.Float32RoundToOdd(x))))
	case F16:
		return float64(float16.Fromfloat32(round.Float32RoundToOdd(x)).Float32())
	}
	return x
}
