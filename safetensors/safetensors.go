// Package safetensors reads and writes the safetensors container: an 8-byte
// little-endian header length, a JSON header naming each tensor's dtype, shape
// and byte range, then the raw little-endian data. It is the format PyTorch
// tools dump, and kimimoe uses it for case files and reference vectors.
//
// Parse checks everything the header claims against the bytes it has: a
// header longer than the file, an unknown dtype, a byte range outside the data
// or of the wrong size for the shape, overlapping ranges. Each failure is an
// error wrapping ErrFormat that names the tensor or key at fault.
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
)

// ErrFormat is wrapped by every error about malformed safetensors data.
var ErrFormat = errors.New("safetensors: malformed file")

// maxHeader bounds the JSON header so a lying length cannot make Parse
// allocate without limit (the reference implementation uses 100 MB).
const maxHeader = 100 << 20

// DType is a tensor element type, spelled as in the safetensors header.
type DType string

// Element types kimimoe reads and writes.
const (
	F64  DType = "F64"
	F32  DType = "F32"
	BF16 DType = "BF16"
	F16  DType = "F16"
	U8   DType = "U8"
	I8   DType = "I8"
	U16  DType = "U16"
	I16  DType = "I16"
	I32  DType = "I32"
	U32  DType = "U32"
	I64  DType = "I64"
	U64  DType = "U64"
	BOOL DType = "BOOL"
)

// Size is the element size in bytes, 0 for an unknown dtype.
func (d DType) Size() int {
	switch d {
	case F64, I64, U64:
		return 8
	case F32, I32, U32:
		return 4
	case BF16, F16, U16, I16:
		return 2
	case U8, I8, BOOL:
		return 1
	}
	return 0
}

// Tensor is one named tensor. Data is little-endian; after Parse it aliases
// the parsed buffer.
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
}

// NumElements is the product of the shape (1 for a scalar).
func (t *Tensor) NumElements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// File is a parsed safetensors file: tensors in data order, and metadata.
type File struct {
	Tensors  []*Tensor
	Metadata map[string]string
}

// Get returns the named tensor, or nil.
func (f *File) Get(name string) *Tensor {
	for _, t := range f.Tensors {
		if t.Name == name {
			return t
		}
	}
	return nil
}

type entry struct {
	DType   DType   `json:"dtype"`
	Shape   []int   `json:"shape"`
	Offsets []int64 `json:"data_offsets"`
}

// Parse reads a whole safetensors file held in data. Tensor data aliases data.
func Parse(data []byte) (*File, error) {
	if len(data) < 8 {
		return nil, fmt.Errorf("%w: %d bytes is shorter than the 8-byte header length", ErrFormat, len(data))
	}
	hlen := binary.LittleEndian.Uint64(data)
	if hlen > maxHeader || hlen > uint64(len(data)-8) {
		return nil, fmt.Errorf("%w: header length %d exceeds the %d bytes that follow it (truncated file?)", ErrFormat, hlen, len(data)-8)
	}
	body := data[8+hlen:]
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data[8 : 8+hlen]))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%w: header is not a JSON object: %v", ErrFormat, err)
	}
	f := &File{Metadata: map[string]string{}}
	type span struct {
		lo, hi int64
		name   string
	}
	var spans []span
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &f.Metadata); err != nil {
				return nil, fmt.Errorf("%w: __metadata__ must map strings to strings: %v", ErrFormat, err)
			}
			continue
		}
		var e entry
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, fmt.Errorf("%w: tensor %q: bad header entry: %v", ErrFormat, name, err)
		}
		if e.DType.Size() == 0 {
			return nil, fmt.Errorf("%w: tensor %q: unknown dtype %q", ErrFormat, name, e.DType)
		}
		if len(e.Offsets) != 2 {
			return nil, fmt.Errorf("%w: tensor %q: data_offsets must hold 2 numbers, has %d", ErrFormat, name, len(e.Offsets))
		}
		n := int64(1)
		for _, d := range e.Shape {
			if d < 0 {
				return nil, fmt.Errorf("%w: tensor %q: negative dimension in shape %v", ErrFormat, name, e.Shape)
			}
			if d > 0 && n > math.MaxInt64/int64(d)/8 {
				return nil, fmt.Errorf("%w: tensor %q: shape %v is too large", ErrFormat, name, e.Shape)
			}
			n *= int64(d)
		}
		lo, hi := e.Offsets[0], e.Offsets[1]
		if lo < 0 || hi < lo || hi > int64(len(body)) {
			return nil, fmt.Errorf("%w: tensor %q: data_offsets [%d, %d] fall outside the %d data bytes (truncated file?)", ErrFormat, name, lo, hi, len(body))
		}
		if want := n * int64(e.DType.Size()); hi-lo != want {
			return nil, fmt.Errorf("%w: tensor %q: %d data bytes, but shape %v of %s needs %d", ErrFormat, name, hi-lo, e.Shape, e.DType, want)
		}
		spans = append(spans, span{lo, hi, name})
		f.Tensors = append(f.Tensors, &Tensor{Name: name, DType: e.DType, Shape: append([]int{}, e.Shape...), Data: body[lo:hi:hi]})
	}
	sort.Slice(spans, func(i, j int) bool {
		return spans[i].lo < spans[j].lo || spans[i].lo == spans[j].lo && spans[i].name < spans[j].name
	})
	byName := map[string]*Tensor{}
	for _, t := range f.Tensors {
		byName[t.Name] = t
	}
	f.Tensors = f.Tensors[:0]
	for i, sp := range spans {
		if i > 0 && sp.lo < spans[i-1].hi {
			return nil, fmt.Errorf("%w: tensors %q and %q overlap", ErrFormat, spans[i-1].name, sp.name)
		}
		f.Tensors = append(f.Tensors, byName[sp.name])
	}
	return f, nil
}

// Write writes tensors, in the order given, and metadata. Each tensor's Data
// must hold exactly its shape's bytes.
func Write(w io.Writer, tensors []*Tensor, metadata map[string]string) error {
	header := map[string]any{}
	if len(metadata) > 0 {
		header["__metadata__"] = metadata
	}
	var off int64
	for _, t := range tensors {
		if t.DType.Size() == 0 {
			return fmt.Errorf("safetensors: tensor %q: unknown dtype %q", t.Name, t.DType)
		}
		if want := t.NumElements() * t.DType.Size(); len(t.Data) != want {
			return fmt.Errorf("safetensors: tensor %q: %d data bytes, shape %v of %s needs %d", t.Name, len(t.Data), t.Shape, t.DType, want)
		}
		if _, dup := header[t.Name]; dup || t.Name == "__metadata__" {
			return fmt.Errorf("safetensors: duplicate or reserved tensor name %q", t.Name)
		}
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		header[t.Name] = entry{DType: t.DType, Shape: shape, Offsets: []int64{off, off + int64(len(t.Data))}}
		off += int64(len(t.Data))
	}
	h, err := json.Marshal(header)
	if err != nil {
		return fmt.Errorf("safetensors: encoding header: %w", err)
	}
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(h)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	if _, err := w.Write(h); err != nil {
		return err
	}
	for _, t := range tensors {
		if _, err := w.Write(t.Data); err != nil {
			return err
		}
	}
	return nil
}
