// Package safetensors reads and writes the safetensors container: an 8-byte
// little-endian header length, a JSON header naming each tensor's dtype,
// shape and byte range, then the raw little-endian data. It is the format
// PyTorch tools dump; kimimoe uses it for case files, checkpoints and
// reference vectors.
//
// # Strictness
//
// Parse and Open check everything the header claims against the bytes
// there are, and follow the format's rules exactly: the header is one JSON
// object starting with '{', padded at its end with spaces (0x20) only; no
// key appears twice (neither a tensor nor __metadata__, nor a metadata
// key); __metadata__ maps strings to strings; every dtype is known; each
// tensor's byte range has the size its shape needs; the ranges cover the
// data buffer exactly, with no overlap, no hole and nothing after the last.
// The header is at most MaxHeaderBytes and names at most MaxTensors
// tensors. Each failure is an error wrapping ErrFormat that names the
// tensor or key at fault.
//
// # Files
//
// Open parses a file's header and reads tensors on demand (Reader.Tensor),
// so a reader of a large checkpoint touches only what it asks for. On
// Unix the file is memory-mapped and each tensor copied out of the mapping
// with faults turned into errors (a file truncated while it is read gives
// an error naming it, not SIGBUS); elsewhere it is read with ReadAt.
// Non-regular files (directories, FIFOs, devices) are refused at open
// without blocking. WriteFile writes atomically through a temporary file
// in the target's directory and never replaces anything but a regular
// file.
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

// Limits on what a header may claim, so that a lying header cannot make a
// reader allocate without bound. MaxHeaderBytes is the reference
// implementation's 100 MB; MaxTensors is far above any real file (a
// Kimi-K3 shard holds a few thousand tensors).
const (
	MaxHeaderBytes = 100_000_000
	MaxTensors     = 1 << 18
)

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

// Header is a parsed header: the tensors in data order, with their byte
// ranges relative to the start of the data buffer, and the metadata.
type Header struct {
	Entries  []Entry
	Metadata map[string]string
	// DataOffset is where the data buffer starts in the file (8 + header
	// length); DataSize is its length.
	DataOffset, DataSize int64
}

// Entry is one tensor's header entry.
type Entry struct {
	Name   string
	DType  DType
	Shape  []int
	Lo, Hi int64 // byte range in the data buffer
}

// Find returns the named entry, or nil.
func (h *Header) Find(name string) *Entry {
	for i := range h.Entries {
		if h.Entries[i].Name == name {
			return &h.Entries[i]
		}
	}
	return nil
}

func formatErr(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrFormat}, a...)...)
}

// headerLength reads and checks the 8-byte header length against the file
// size.
func headerLength(prefix []byte, fileSize int64) (int64, error) {
	if fileSize < 8 || len(prefix) < 8 {
		return 0, formatErr("%d bytes is shorter than the 8-byte header length", fileSize)
	}
	hlen := binary.LittleEndian.Uint64(prefix)
	if hlen > MaxHeaderBytes {
		return 0, formatErr("header length %d is over the %d-byte limit", hlen, MaxHeaderBytes)
	}
	if int64(hlen) > fileSize-8 {
		return 0, formatErr("header length %d exceeds the %d bytes that follow it (truncated file?)", hlen, fileSize-8)
	}
	return int64(hlen), nil
}

// parseHeader parses and checks the JSON header h for a data buffer of
// dataSize bytes.
func parseHeader(h []byte, dataSize int64) (*Header, error) {
	if len(h) == 0 || h[0] != '{' {
		return nil, formatErr("header does not start with '{'")
	}
	dec := json.NewDecoder(bytes.NewReader(h))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil {
		return nil, formatErr("header is not a JSON object: %v", err)
	}
	hd := &Header{Metadata: map[string]string{}, DataSize: dataSize}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, formatErr("header is not a JSON object: %v", err)
		}
		name, _ := tok.(string)
		if seen[name] {
			return nil, formatErr("key %q appears twice in the header", name)
		}
		seen[name] = true
		if name == "__metadata__" {
			if hd.Metadata, err = decodeMetadata(dec); err != nil {
				return nil, err
			}
			continue
		}
		if len(hd.Entries) == MaxTensors {
			return nil, formatErr("header names more than %d tensors", MaxTensors)
		}
		var e entry
		if err := dec.Decode(&e); err != nil {
			return nil, formatErr("tensor %q: bad header entry: %v", name, err)
		}
		en, err := checkEntry(name, e, dataSize)
		if err != nil {
			return nil, err
		}
		hd.Entries = append(hd.Entries, en)
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, formatErr("header is not a JSON object: %v", err)
	}
	for _, c := range h[dec.InputOffset():] {
		if c != ' ' {
			return nil, formatErr("header has bytes other than space padding after its JSON object (byte 0x%02x)", c)
		}
	}
	// Data order; the ranges must tile [0, dataSize) exactly.
	sort.SliceStable(hd.Entries, func(i, j int) bool {
		a, b := &hd.Entries[i], &hd.Entries[j]
		return a.Lo < b.Lo || a.Lo == b.Lo && a.Hi < b.Hi
	})
	var next int64
	prev := ""
	for _, e := range hd.Entries {
		switch {
		case e.Lo < next:
			return nil, formatErr("tensors %q and %q overlap", prev, e.Name)
		case e.Lo > next:
			return nil, formatErr("data bytes [%d, %d) before tensor %q belong to no tensor (a hole in the data buffer)", next, e.Lo, e.Name)
		}
		next, prev = e.Hi, e.Name
	}
	if next != dataSize {
		return nil, formatErr("%d data bytes after the last tensor belong to no tensor (the data buffer is %d bytes, the tensors cover %d)", dataSize-next, dataSize, next)
	}
	return hd, nil
}

// decodeMetadata reads the __metadata__ object: string keys, each once,
// to string values.
func decodeMetadata(dec *json.Decoder) (map[string]string, error) {
	md := map[string]string{}
	bad := func(why string) error { return formatErr("__metadata__ must map strings to strings: %s", why) }
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, bad("not an object")
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, bad(err.Error())
		}
		key, _ := tok.(string)
		if _, dup := md[key]; dup {
			return nil, formatErr("__metadata__ key %q appears twice", key)
		}
		tok, err = dec.Token()
		if err != nil {
			return nil, bad(err.Error())
		}
		v, ok := tok.(string)
		if !ok {
			return nil, bad(fmt.Sprintf("key %q has a %T value", key, tok))
		}
		md[key] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, bad(err.Error())
	}
	return md, nil
}

func checkEntry(name string, e entry, dataSize int64) (Entry, error) {
	if e.DType.Size() == 0 {
		return Entry{}, formatErr("tensor %q: unknown dtype %q", name, e.DType)
	}
	if len(e.Offsets) != 2 {
		return Entry{}, formatErr("tensor %q: data_offsets must hold 2 numbers, has %d", name, len(e.Offsets))
	}
	n := int64(1)
	for _, d := range e.Shape {
		if d < 0 {
			return Entry{}, formatErr("tensor %q: negative dimension in shape %v", name, e.Shape)
		}
		if d > 0 && n > math.MaxInt64/int64(d)/8 {
			return Entry{}, formatErr("tensor %q: shape %v is too large", name, e.Shape)
		}
		n *= int64(d)
	}
	lo, hi := e.Offsets[0], e.Offsets[1]
	if lo < 0 || hi < lo || hi > dataSize {
		return Entry{}, formatErr("tensor %q: data_offsets [%d, %d] fall outside the %d data bytes (truncated file?)", name, lo, hi, dataSize)
	}
	if want := n * int64(e.DType.Size()); hi-lo != want {
		return Entry{}, formatErr("tensor %q: %d data bytes, but shape %v of %s needs %d", name, hi-lo, e.Shape, e.DType, want)
	}
	return Entry{Name: name, DType: e.DType, Shape: append([]int{}, e.Shape...), Lo: lo, Hi: hi}, nil
}

// ParseHeader parses the header of a file of fileSize bytes from prefix,
// which must hold at least its first 8 + header-length bytes.
func ParseHeader(prefix []byte, fileSize int64) (*Header, error) {
	hlen, err := headerLength(prefix, fileSize)
	if err != nil {
		return nil, err
	}
	if int64(len(prefix)) < 8+hlen {
		return nil, formatErr("header of %d bytes, but only %d given", hlen, len(prefix)-8)
	}
	h, err := parseHeader(prefix[8:8+hlen], fileSize-8-hlen)
	if err != nil {
		return nil, err
	}
	h.DataOffset = 8 + hlen
	return h, nil
}

// Parse reads a whole safetensors file held in data. Tensor data aliases
// data.
func Parse(data []byte) (*File, error) {
	h, err := ParseHeader(data, int64(len(data)))
	if err != nil {
		return nil, err
	}
	body := data[h.DataOffset:]
	f := &File{Metadata: h.Metadata, Tensors: make([]*Tensor, len(h.Entries))}
	for i, e := range h.Entries {
		f.Tensors[i] = &Tensor{Name: e.Name, DType: e.DType, Shape: e.Shape, Data: body[e.Lo:e.Hi:e.Hi]}
	}
	return f, nil
}

// Write writes tensors, in the order given, and metadata. Each tensor's Data
// must hold exactly its shape's bytes.
func Write(w io.Writer, tensors []*Tensor, metadata map[string]string) error {
	if w == nil {
		return fmt.Errorf("safetensors: Write to a nil writer")
	}
	header := map[string]any{}
	if len(metadata) > 0 {
		header["__metadata__"] = metadata
	}
	var off int64
	// What the reader refuses is refused here, before a byte is written.
	if len(tensors) > MaxTensors {
		return fmt.Errorf("safetensors: %d tensors, over the %d a reader takes", len(tensors), MaxTensors)
	}
	for i, t := range tensors {
		if t == nil {
			return fmt.Errorf("safetensors: tensor %d of %d is nil", i, len(tensors))
		}
		for _, d := range t.Shape {
			if d < 0 {
				return fmt.Errorf("safetensors: tensor %q: negative dimension in shape %v", t.Name, t.Shape)
			}
		}
		if t.DType.Size() == 0 {
			return fmt.Errorf("safetensors: tensor %q: unknown dtype %q", t.Name, t.DType)
		}
		if want := t.NumElements() * t.DType.Size(); len(t.Data) != want {
			return fmt.Errorf("safetensors: tensor %q: %d data bytes, shape %v of %s needs %d", t.Name, len(t.Data), t.Shape, t.DType, want)
		}
		if t.Name == "" {
			return fmt.Errorf("safetensors: a tensor has an empty name")
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
	if len(h) > MaxHeaderBytes {
		return fmt.Errorf("safetensors: a %d-byte header, over the %d bytes a reader takes", len(h), MaxHeaderBytes)
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
