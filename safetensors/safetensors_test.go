package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

func encode(t testing.TB, header string, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(header)))
	b.WriteString(header)
	b.Write(data)
	return b.Bytes()
}

func TestParseErrors(t *testing.T) {
	cases := []struct{ name, header, want string }{
		{"unknown dtype", `{"a":{"dtype":"F8","shape":[1],"data_offsets":[0,1]}}`, "unknown dtype"},
		{"size mismatch", `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, "needs 8"},
		{"outside data", `{"a":{"dtype":"U8","shape":[9],"data_offsets":[0,9]}}`, "outside"},
		{"overlap", `{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}`, "overlap"},
		{"negative dim", `{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}}`, "negative"},
		{"bad metadata", `{"__metadata__":{"k":1}}`, "__metadata__"},
		{"not json", `{"a":`, "bad header entry"},
		{"offsets count", `{"a":{"dtype":"U8","shape":[1],"data_offsets":[0]}}`, "data_offsets"},
	}
	for _, c := range cases {
		_, err := Parse(encode(t, c.header, make([]byte, 8)))
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrFormat mentioning %q", c.name, err, c.want)
		}
	}
	if _, err := Parse([]byte{1, 2, 3}); !errors.Is(err, ErrFormat) {
		t.Errorf("3-byte file: %v", err)
	}
	huge := make([]byte, 16)
	binary.LittleEndian.PutUint64(huge, 1<<62)
	if _, err := Parse(huge); !errors.Is(err, ErrFormat) {
		t.Errorf("header length 2^62: %v", err)
	}
}

func TestWriteParseRoundTrip(t *testing.T) {
	ts := []*Tensor{
		FromFloat32("f", []int{2, 2}, []float32{1, -2, 3.5, 0}),
		FromFloat64("d", []int{1}, []float64{1e-300}),
		FromInt32("i", []int{3}, []int32{-1, 0, 7}),
		FromUint16("h", BF16, []int{2}, []uint16{0x3f80, 0xffff}),
		FromUint8("u", []int{0}, nil),
	}
	var b bytes.Buffer
	if err := Write(&b, ts, map[string]string{"k": "v"}); err != nil {
		t.Fatal(err)
	}
	f, err := Parse(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if f.Metadata["k"] != "v" || len(f.Tensors) != 5 || f.Tensors[0].Name != "f" {
		t.Fatalf("parsed %+v", f)
	}
	fv, _ := f.Get("f").Float32s()
	iv, _ := f.Get("i").Int64s()
	hv, _ := f.Get("h").Uint16s()
	if fv[2] != 3.5 || iv[0] != -1 || hv[1] != 0xffff {
		t.Fatalf("values: %v %v %v", fv, iv, hv)
	}
	if _, err := f.Get("f").Float64s(); !errors.Is(err, ErrFormat) {
		t.Error("reading F32 as F64 must fail")
	}
	if err := Write(&b, []*Tensor{{Name: "x", DType: F32, Shape: []int{2}, Data: make([]byte, 4)}}, nil); err == nil {
		t.Error("Write accepted 4 bytes for 2 float32")
	}
}

// The reference files were written by the generator script's own writer:
// reading them checks this reader against a second implementation.
func TestReadsPythonWrittenFile(t *testing.T) {
	m, err := ReadFile("../testdata/ref/oracle_situ_mxfp8_rceil_xq.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	if m.Get("x_q") == nil || m.Metadata["activation"] != "situ" {
		t.Fatalf("unexpected content: %v", m.Metadata)
	}
}

// FuzzParse: Parse never panics, and what it accepts can be written back
// and parsed to the same tensors.
func FuzzParse(f *testing.F) {
	b, _ := os.ReadFile("../testdata/ref/oracle_situ_mxfp8_rceil_xq.safetensors")
	f.Add(b)
	f.Add(encode(f, `{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}`, []byte{1, 2}))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := Write(&out, p.Tensors, p.Metadata); err != nil {
			t.Fatalf("accepted file does not write back: %v", err)
		}
		q, err := Parse(out.Bytes())
		if err != nil || len(q.Tensors) != len(p.Tensors) {
			t.Fatalf("written file does not parse back: %v", err)
		}
		for i := range p.Tensors {
			if !bytes.Equal(p.Tensors[i].Data, q.Tensors[i].Data) {
				t.Fatalf("tensor %q changed", p.Tensors[i].Name)
			}
		}
	})
}

// A nil writer or a nil tensor is an error, not a panic (round 3's R3-15).
func TestWriteNilIsAnError(t *testing.T) {
	if err := Write(nil, nil, nil); err == nil {
		t.Error("Write(nil writer): no error")
	}
	if err := Write(&bytes.Buffer{}, []*Tensor{nil}, nil); err == nil {
		t.Error("Write(nil tensor): no error")
	}
}

// Write refuses what Parse refuses (round 3's R3-16: files were written
// that no reader would take): a negative dimension, and more tensors than
// MaxTensors.
func TestWriteRefusesWhatParseRefuses(t *testing.T) {
	var buf bytes.Buffer
	neg := &Tensor{Name: "a", DType: U8, Shape: []int{-1, -1}, Data: []byte{7}}
	if err := Write(&buf, []*Tensor{neg}, nil); err == nil {
		_, perr := Parse(buf.Bytes())
		t.Errorf("a shape of [-1, -1] was written (Parse: %v)", perr)
	}
	many := make([]*Tensor, MaxTensors+1)
	for i := range many {
		many[i] = &Tensor{Name: fmt.Sprint(i), DType: U8, Shape: []int{0}, Data: []byte{}}
	}
	buf.Reset()
	if err := Write(&buf, many, nil); err == nil {
		t.Errorf("%d tensors were written", len(many))
	}
}
