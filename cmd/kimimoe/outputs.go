package main

import (
	"bytes"
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

// sniffBytes is how much of an existing file is read to tell its kind.
const sniffBytes = 512

// looksLike reports whether the start of a file is of kind k.
func looksLike(head []byte, k outputKind) bool {
	t := bytes.TrimLeft(head, " \t\r\n")
	switch k {
	case kindJSON:
		return len(t) > 0 && (t[0] == '{' || t[0] == '[')
	case kindSVG:
		return bytes.HasPrefix(t, []byte("<?xml")) || bytes.HasPrefix(t, []byte("<svg"))
	case kindPNG:
		return bytes.HasPrefix(head, []byte("\x89PNG\r\n\x1a\n"))
	case kindPDF:
		return bytes.HasPrefix(head, []byte("%PDF"))
	case kindSafetensors:
		return len(head) >= 9 && head[8] == '{'
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
	head := make([]byte, sniffBytes)
	n, _ := io.ReadFull(f, head)
	if n > 0 && !looksLike(head[:n], k) {
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
