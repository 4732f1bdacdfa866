//go:build cgo

package cuda

import (
	"flag"
	"testing"

	"kimimoe/backend/cuda/internal/cu"
)

var ptxas = flag.Bool("ptxas", false, "TestPtxasNotes prints ptxas's notes (registers, spills, serialized wgmma) per kernel")

// TestPtxasNotes compiles the module for sm_90a with ptxas's -v and
// prints its notes: how a kernel change is checked for spills and
// register counts (go test -run TestPtxasNotes -ptxas -v).
func TestPtxasNotes(t *testing.T) {
	if !*ptxas {
		t.Skip("run with -ptxas")
	}
	if err := cu.LoadNVRTC(); err != nil {
		t.Skip(err)
	}
	_, log, err := cu.Compile(KernelProgram(), "kimimoe.cu", ArchSM90a, append(compileOptions(ArchSM90a, false), "--ptxas-options=-v"))
	if err != nil {
		t.Fatal(err)
	}
	t.Log(log)
}
