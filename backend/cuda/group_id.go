package cuda

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"kimimoe/internal/regular"
)

// UniqueID is NCCL's ncclUniqueId: 128 opaque bytes that rank 0 makes
// (NewUniqueID) and every rank of a group passes to OpenRank. It travels
// as 256 hex digits, in an environment variable or a file.
type UniqueID [128]byte

// String is the id as 256 lower-case hex digits.
func (id UniqueID) String() string { return hex.EncodeToString(id[:]) }

// ParseUniqueID reads 256 hex digits (surrounding white space allowed).
func ParseUniqueID(s string) (UniqueID, error) {
	var id UniqueID
	s = strings.TrimSpace(s)
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(id) {
		return id, fmt.Errorf("%w: an NCCL unique id is %d hex digits, got %d characters", ErrGroup, 2*len(id), len(s))
	}
	copy(id[:], b)
	return id, nil
}

// WriteUniqueIDFile writes id to path for the other ranks: to a temporary
// file in the same directory, renamed into place, so a reader never sees
// a partial id. An existing file is an error (a stale id from an earlier
// run would make the ranks wait for each other forever).
func WriteUniqueIDFile(path string, id UniqueID) error {
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("%w: id file %s exists already (left from an earlier run? remove it)", ErrGroup, path)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".kimimoe-id-*.tmp")
	if err != nil {
		return fmt.Errorf("%w: id file: %v", ErrGroup, err)
	}
	_, err = f.WriteString(id.String() + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(f.Name(), path) // fails if path appeared meanwhile
	}
	os.Remove(f.Name())
	if err != nil {
		return fmt.Errorf("%w: id file: %v", ErrGroup, err)
	}
	return nil
}

// ReadUniqueIDFile waits up to timeout for path to appear (rank 0 writes
// it) and reads the id from it, polling every 20 ms.
func ReadUniqueIDFile(path string, timeout time.Duration) (UniqueID, error) {
	deadline := time.Now().Add(timeout)
	for {
		data, err := readIDFile(path)
		if err == nil {
			id, err := ParseUniqueID(string(data))
			if err != nil {
				return id, fmt.Errorf("id file %s: %w", path, err)
			}
			return id, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return UniqueID{}, fmt.Errorf("%w: id file: %v", ErrGroup, err)
		}
		if time.Now().After(deadline) {
			return UniqueID{}, fmt.Errorf("%w: id file %s did not appear within %v (did rank 0 start?)", ErrTimeout, path, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readIDFile reads an id file only if it is a small regular file (a FIFO
// would block past any timeout; a device never end).
func readIDFile(path string) ([]byte, error) {
	return regular.ReadFile(path, 4096, "an id file (256 hex digits)")
}

// RankEnvNames names the launcher variables RankEnv reads from, as set
// now ("KIMIMOE_RANK/KIMIMOE_WORLD_SIZE" or "RANK/WORLD_SIZE"), for messages.
func RankEnvNames() string {
	if os.Getenv("KIMIMOE_RANK") != "" || os.Getenv("KIMIMOE_WORLD_SIZE") != "" {
		return "KIMIMOE_RANK/KIMIMOE_WORLD_SIZE"
	}
	return "RANK/WORLD_SIZE"
}

// RankEnv reads a launcher's rank and world size: KIMIMOE_RANK and
// KIMIMOE_WORLD_SIZE, else torchrun's RANK and WORLD_SIZE. ok is false if
// neither pair is set.
func RankEnv() (rank, size int, ok bool, err error) {
	for _, names := range [][2]string{{"KIMIMOE_RANK", "KIMIMOE_WORLD_SIZE"}, {"RANK", "WORLD_SIZE"}} {
		r, s := os.Getenv(names[0]), os.Getenv(names[1])
		if r == "" && s == "" {
			continue
		}
		if _, err := fmt.Sscanf(r+" "+s, "%d %d", &rank, &size); err != nil || size < 1 || rank < 0 || rank >= size {
			return 0, 0, false, fmt.Errorf("%w: %s=%q %s=%q: want 0 <= rank < world size", ErrGroup, names[0], r, names[1], s)
		}
		return rank, size, true, nil
	}
	return 0, 0, false, nil
}

// checkDevices checks a device list for a group on a machine with n
// devices: at least one, each an ordinal below n, none twice.
func checkDevices(devices []int, n int) error {
	if len(devices) == 0 {
		return fmt.Errorf("%w: no devices given", ErrGroup)
	}
	seen := map[int]bool{}
	for _, d := range devices {
		if d < 0 || d >= n {
			return fmt.Errorf("%w: device %d: this machine has %d device(s) (ordinals 0 to %d)", ErrGroup, d, n, n-1)
		}
		if seen[d] {
			return fmt.Errorf("%w: device %d listed twice", ErrGroup, d)
		}
		seen[d] = true
	}
	return nil
}
