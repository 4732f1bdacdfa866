package safetensors

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Typed views. Each checks the dtype and returns a fresh slice decoded from
// little-endian bytes (Uint8s aliases the data instead).

func (t *Tensor) want(d DType) error {
	if t.DType != d {
		return fmt.Errorf("%w: tensor %q has dtype %s, want %s", ErrFormat, t.Name, t.DType, d)
	}
	return nil
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

// FromFloat32 builds an F32 tensor.
func FromFloat32(name string, shape []int, v []float32) *Tensor {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return &Tensor{Name: name, DType: F32, Shape: shape, Data: b}
}

// FromFloat64 builds an F64 tensor.
func FromFloat64(name string, shape []int, v []float64) *Tensor {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x))
	}
	return &Tensor{Name: name, DType: F64, Shape: shape, Data: b}
}

// FromUint16 builds a tensor of 2-byte elements (U16, BF16 or F16 bits).
func FromUint16(name string, d DType, shape []int, v []uint16) *Tensor {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], x)
	}
	return &Tensor{Name: name, DType: d, Shape: shape, Data: b}
}

// FromInt32 builds an I32 tensor.
func FromInt32(name string, shape []int, v []int32) *Tensor {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return &Tensor{Name: name, DType: I32, Shape: shape, Data: b}
}

// FromUint8 builds a U8 tensor over v (not copied).
func FromUint8(name string, shape []int, v []uint8) *Tensor {
	return &Tensor{Name: name, DType: U8, Shape: shape, Data: v}
}
