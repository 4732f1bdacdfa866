package cuda

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"kimimoe/moe"
)

func TestHomeRows(t *testing.T) {
	// Every token has exactly one home, the shards are contiguous and in
	// rank order, and no shard is longer than ceil(m/size).
	for _, m := range []int{0, 1, 2, 7, 8, 9, 100} {
		for _, size := range []int{1, 2, 3, 4, 8} {
			next := 0
			for r := range size {
				lo, hi := homeRows(m, size, r)
				if lo != next || hi < lo || hi-lo > (m+size-1)/size {
					t.Fatalf("m=%d size=%d rank %d: [%d, %d) after %d", m, size, r, lo, hi, next)
				}
				next = hi
			}
			if next != m {
				t.Fatalf("m=%d size=%d: shards end at %d", m, size, next)
			}
		}
	}
}

// The dispatch plan against a direct count: token t goes to device d iff
// one of its ids is in d's range, once, and -1 goes nowhere. Hand-made
// routing over 2 devices of 4 experts (global ids 8..15: EP rank 1 of 2
// split over 2 devices, so device 0 holds 8..11 and device 1 12..15).
func TestPlanDispatch(t *testing.T) {
	eps := []moe.EP{{Size: 4, Rank: 2}, {Size: 4, Rank: 3}}
	ids := []int32{
		8, 9, // token 0: device 0 twice -> once
		12, -1, // token 1: device 1
		-1, -1, // token 2: nowhere
		3, 15, // token 3: another rank's expert and device 1
		11, 12, // token 4: both
	}
	p0 := planDispatch(ids, 2, eps, 4, 0) // home of tokens 0..2
	p1 := planDispatch(ids, 2, eps, 4, 1) // home of tokens 3..4
	if p0.lo != 0 || p0.hi != 3 || p1.lo != 3 || p1.hi != 5 {
		t.Fatalf("home rows: [%d,%d) [%d,%d)", p0.lo, p0.hi, p1.lo, p1.hi)
	}
	want0 := [][]int32{{0}, {1}}
	want1 := [][]int32{{1}, {0, 1}} // home-relative: token 4 is index 1
	if !slices.EqualFunc(p0.send, want0, slices.Equal) || !slices.EqualFunc(p1.send, want1, slices.Equal) {
		t.Errorf("plans: %v and %v, want %v and %v", p0.send, p1.send, want0, want1)
	}
	if c := p1.counts(); !slices.Equal(c, []int32{1, 2}) {
		t.Errorf("counts %v", c)
	}
	// Bytes: K=64, top-2. Rank 0 sends 1 token to device 1 (64+2+16 bytes)
	// and returns the 1 token device 1 sent it (256 bytes).
	sent := [][]int32{p0.counts(), p1.counts()}
	if b := dispatchBytes(sent, 0, 64, 2); b != 82+256 {
		t.Errorf("rank 0 sends %d bytes, want %d", b, 82+256)
	}
}

func TestParseMode(t *testing.T) {
	for _, m := range []Mode{ModeReplicated, ModeDispatch} {
		if got, err := ParseMode(m.String()); got != m || err != nil {
			t.Errorf("%v: %v %v", m, got, err)
		}
	}
	if _, err := ParseMode("both"); !errors.Is(err, ErrGroup) {
		t.Errorf("both: %v", err)
	}
}

func TestUniqueIDFile(t *testing.T) {
	var id UniqueID
	for i := range id {
		id[i] = byte(i * 7)
	}
	got, err := ParseUniqueID(" " + id.String() + "\n")
	if err != nil || got != id {
		t.Fatalf("round trip: %v", err)
	}
	for _, bad := range []string{"", "zz", id.String()[:254], id.String() + "00"} {
		if _, err := ParseUniqueID(bad); !errors.Is(err, ErrGroup) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "id")
	// A reader that starts first waits for the writer.
	done := make(chan error, 1)
	go func() {
		got, err := ReadUniqueIDFile(path, 5*time.Second)
		if err == nil && got != id {
			err = errors.New("read a different id")
		}
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := WriteUniqueIDFile(path, id); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A stale file is refused, not overwritten.
	if err := WriteUniqueIDFile(path, UniqueID{}); !errors.Is(err, ErrGroup) || !strings.Contains(err.Error(), "exists already") {
		t.Errorf("second write: %v", err)
	}
	if got, _ := ReadUniqueIDFile(path, time.Second); got != id {
		t.Error("the second write changed the file")
	}
	// No writer: a timeout naming the file.
	start := time.Now()
	_, err = ReadUniqueIDFile(filepath.Join(dir, "never"), 100*time.Millisecond)
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "never") || time.Since(start) > 2*time.Second {
		t.Errorf("missing file: %v after %v", err, time.Since(start))
	}
	// A truncated id is an error naming the file.
	if err := os.WriteFile(filepath.Join(dir, "short"), []byte("abcd"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadUniqueIDFile(filepath.Join(dir, "short"), time.Second); !errors.Is(err, ErrGroup) || !strings.Contains(err.Error(), "short") {
		t.Errorf("short id: %v", err)
	}
	// No temporary files left behind.
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".kimimoe-id-") {
			t.Errorf("left %s", e.Name())
		}
	}
}

func TestRankEnv(t *testing.T) {
	for _, c := range []struct {
		env        map[string]string
		rank, size int
		ok, bad    bool
	}{
		{env: map[string]string{}, ok: false},
		{env: map[string]string{"RANK": "1", "WORLD_SIZE": "2"}, rank: 1, size: 2, ok: true},
		{env: map[string]string{"KIMIMOE_RANK": "0", "KIMIMOE_WORLD_SIZE": "4", "RANK": "3", "WORLD_SIZE": "8"}, rank: 0, size: 4, ok: true},
		{env: map[string]string{"RANK": "2", "WORLD_SIZE": "2"}, bad: true},
		{env: map[string]string{"RANK": "1"}, bad: true},
		{env: map[string]string{"WORLD_SIZE": "x"}, bad: true},
	} {
		for _, k := range []string{"KIMIMOE_RANK", "KIMIMOE_WORLD_SIZE", "RANK", "WORLD_SIZE"} {
			t.Setenv(k, c.env[k])
		}
		r, s, ok, err := RankEnv()
		if c.bad {
			if !errors.Is(err, ErrGroup) {
				t.Errorf("%v: %v", c.env, err)
			}
			continue
		}
		if err != nil || r != c.rank || s != c.size || ok != c.ok {
			t.Errorf("%v: %d %d %v %v", c.env, r, s, ok, err)
		}
	}
}

func TestCheckDevices(t *testing.T) {
	if err := checkDevices([]int{0, 1}, 2); err != nil {
		t.Error(err)
	}
	for _, c := range []struct {
		devs []int
		want string
	}{{nil, "no devices"}, {[]int{0, 2}, "device 2: this machine has 2 device(s)"}, {[]int{1, 1}, "listed twice"}, {[]int{-1}, "device -1"}} {
		if err := checkDevices(c.devs, 2); !errors.Is(err, ErrGroup) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v", c.devs, err)
		}
	}
}
