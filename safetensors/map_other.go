//go:build !unix

package safetensors

import "os"

// mapFile does not map here: tensors are read with ReadAt.
func mapFile(f *os.File, size int64) ([]byte, func() error) { return nil, nil }

func openNoBlock(path string) (*os.File, error) { return os.Open(path) }
