// Command kernelsrc prints the CUDA source the cuda backend compiles with
// NVRTC (cuda.KernelProgram), for scripts/kernel-syntax.sh.
package main

import (
	"fmt"

	"kimimoe/backend/cuda"
)

func main() { fmt.Print(cuda.KernelProgram()) }
