package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"

	"kimimoe/internal/regular"
	"kimimoe/safetensors"
)

// outputKind is what an output file holds; an existing file at an output
// path is replaced only if it holds the same kind.
type outputKind string

const (
	kindJSON        outputKind = "JSON"
	kindSVG         outputKind = "SVG"
	kindPNG         outputKind = "PNG"
	kindPDF         outputKind = "PDF"
	kindSafetensors outputKind = "safetensors"
)

// sniffBytes is how much of an existing file is read to tell a kind by
// its first bytes.
const sniffBytes = 512

// maxJSONOutput bounds an existing file taken for one of our JSON outputs
// (reports and bench records are far smaller): a larger file is never
// read whole to tell its kind, and never replaced.
const maxJSONOutput = 64 << 20

// maxSafetensorsHeader bounds the header of an existing safetensors file
// read to tell its kind (the reader's own bound is larger; our outputs'
// headers are a few kilobytes).
const maxSafetensorsHeader = 16 << 20

// isKind reports whether the existing file f is of kind k: a JSON output
// must parse as JSON whole, a safetensors file must have a header length
// inside the file and a header that parses as a JSON object; the plot
// formats are told by their first bytes. A binary whose first byte is '{'
// is no JSON file, and a JSON file whose ninth byte is '{' no safetensors.
func isKind(f *os.File, size int64, k outputKind) bool {
	switch k {
	case kindJSON:
		if size > maxJSONOutput {
			return false
		}
		data, err := io.ReadAll(f)
		t := bytes.TrimLeft(data, " \t\r\n")
		return err == nil && len(t) > 0 && (t[0] == '{' || t[0] == '[') && json.Valid(data)
	case kindSafetensors:
		var n [8]byte
		if _, err := io.ReadFull(f, n[:]); err != nil {
			return false
		}
		hl := binary.LittleEndian.Uint64(n[:])
		if hl < 2 || hl > maxSafetensorsHeader || int64(hl) > size-8 {
			return false
		}
		h := make([]byte, hl)
		if _, err := io.ReadFull(f, h); err != nil {
			return false
		}
		h = bytes.TrimRight(h, " ")
		return len(h) > 0 && h[0] == '{' && json.Valid(h)
	}
	head := make([]byte, sniffBytes)
	n, _ := io.ReadFull(f, head)
	return looksLike(head[:n], k)
}

// looksLike reports whether the start of a file is of kind k (the plot
// formats).
func looksLike(head []byte, k outputKind) bool {
	t := bytes.TrimLeft(head, " \t\r\n")
	switch k {
	case kindSVG:
		return bytes.HasPrefix(t, []byte("<?xml")) || bytes.HasPrefix(t, []byte("<svg"))
	case kindPNG:
		return bytes.HasPrefix(head, []byte("\x89PNG\r\n\x1a\n"))
	case kindPDF:
		return bytes.HasPrefix(head, []byte("%PDF"))
	}
	return false
}

// checkOutput checks an output path before any work: what
// safetensors.CheckOutput checks (a regular file or nothing, even through a
// symbolic link; not one of inputs; a directory that takes a new file),
// and that an existing file there is of kind k, so that a mistyped flag
// never replaces a case, a candidate or a checkpoint shard. The flag names
// the output in the error.
func checkOutput(flagName, path string, k outputKind, inputs ...string) error {
	if path == "" {
		return usagef("--%s is empty", flagName)
	}
	target, err := safetensors.CheckOutput(path, inputs...)
	if err != nil {
		return usagef("--%s: %v", flagName, err)
	}
	f, err := os.Open(target)
	if err != nil {
		return nil // absent: a new file
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return usagef("--%s %s: %v", flagName, path, err)
	}
	if st.Size() > 0 && !isKind(f, st.Size(), k) {
		return usagef("--%s %s: the file exists and is not a %s file; refusing to replace it (remove it or pick another name)", flagName, path, k)
	}
	return nil
}

// writeOutput writes data to path atomically (a temporary file in the same
// directory, then a rename), or to stdout for "-".
func writeOutput(path string, data []byte) error {
	if path == "-" {
		_, err := os.Stdout.Write(data)
		return err
	}
	target := path
	if t, err := filepath.EvalSymlinks(path); err == nil {
		target = t
	}
	return regular.WriteAtomic(target, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// checkJSONOutput checks a --json path ("-" is stdout).
func checkJSONOutput(path string, inputs ...string) error {
	if path == "" || path == "-" {
		return nil
	}
	return checkOutput("json", path, kindJSON, inputs...)
}

// checkpointFiles lists the regular files of a checkpoint directory (its
// index and shards among them), which no output may replace.
func checkpointFiles(dir string) []string {
	if dir == "" {
		return nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var files []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") && strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		files = append(files, filepath.Join(dir, e.Name()))
	}
	return files
}

// inputsOf joins input paths, dropping empty ones.
func inputsOf(paths ...string) []string {
	var out []string
	for _, p := range paths {
		if p != "" && p != "-" {
			out = append(out, p)
		}
	}
	return out
}
