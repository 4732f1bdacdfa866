package main

import (
	"os"
	"time"

	"kimimoe/backend/cuda"
)

// groupFlags are the flags of validate and bench that spread a layer's
// experts over several GPUs (backend/cuda's Group).
type groupFlags struct {
	devices int
	mode    string
	idFile  string
	timeout time.Duration
	// rank and size come from the launcher's environment (KIMIMOE_RANK
	// and KIMIMOE_WORLD_SIZE, or torchrun's RANK and WORLD_SIZE): one
	// process per GPU.
	rank, size int
	perRank    bool
}

func addGroupFlags(fs *flagSet, modes, defaultMode string) *groupFlags {
	gf := &groupFlags{}
	fs.IntVar(&gf.devices, "devices", 1, "cuda: spread the layer's experts over this many GPUs (expert parallelism through NCCL; see the README's \"On a GPU\")")
	fs.StringVar(&gf.mode, "mode", defaultMode, "with --devices: how tokens move: "+modes)
	fs.StringVar(&gf.idFile, "nccl-id-file", "", "one process per GPU: rank 0 writes the NCCL unique id here, the other ranks wait for it (or set NCCL_COMM_ID=host:port on every rank)")
	fs.DurationVar(&gf.timeout, "nccl-timeout", 2*time.Minute, "with --devices: abort a collective (a dead peer) after this long")
	return gf
}

// check validates the flags against the launcher's environment; active
// reports whether a group was asked for.
func (gf *groupFlags) check(backendName string) (active bool, err error) {
	if gf.devices < 1 || gf.devices > maxDevices {
		return false, usagef("--devices %d: want 1 to %d", gf.devices, maxDevices)
	}
	if gf.timeout <= 0 {
		return false, usagef("--nccl-timeout %v: want a positive duration", gf.timeout)
	}
	if backendName != "cuda" {
		// The launcher's variables ask for a multi-GPU run only of the GPU
		// backend; any other backend runs in one process as asked.
		if gf.devices > 1 {
			return false, usagef("--devices %d needs --backend cuda", gf.devices)
		}
		return false, nil
	}
	rank, size, perRank, err := cuda.RankEnv()
	if err != nil {
		return false, asUsage(err)
	}
	if perRank && size == 1 {
		perRank = false // a world of one process is a plain run
	}
	gf.rank, gf.size, gf.perRank = rank, size, perRank
	if perRank {
		if gf.devices != 1 && gf.devices != size {
			return false, usagef("--devices %d, but the launcher's world size (%s) is %d", gf.devices, cuda.RankEnvNames(), size)
		}
		gf.devices = size
		if gf.idFile == "" && os.Getenv("NCCL_COMM_ID") == "" {
			return false, usagef("one process per GPU (rank %d of %d, from %s) needs --nccl-id-file FILE or NCCL_COMM_ID=host:port", rank, size, cuda.RankEnvNames())
		}
	}
	return gf.devices > 1 || perRank, nil
}

// maxDevices bounds --devices: more GPUs than one host holds.
const maxDevices = 64
