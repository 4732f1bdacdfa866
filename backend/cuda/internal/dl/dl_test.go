package dl

import (
	"errors"
	"strings"
	"testing"
)

var errMissing = errors.New("missing")

func fake(loads map[string]string, inits *int) *Library {
	return &Library{Name: "Fake", Env: "KIMIMOE_TEST_FAKE_LIB",
		Defaults: func() []string { return []string{"a.so", "b.so"} },
		Load: func(p string) string {
			if why, ok := loads[p]; ok {
				return why
			}
			return "not found"
		},
		Init:    func() error { *inits++; return nil },
		Missing: errMissing}
}

// The first default that loads wins, once; the variable, when set, is the
// only path tried; every failure names each path with its reason.
func TestLibrary(t *testing.T) {
	inits := 0
	l := fake(map[string]string{"b.so": ""}, &inits)
	if err := l.Open(); err != nil || !l.Loaded() || inits != 1 {
		t.Fatalf("b.so loads: err %v, loaded %v, inits %d", err, l.Loaded(), inits)
	}
	if err := l.Open(); err != nil || inits != 1 {
		t.Fatalf("a second Open loaded again: err %v, inits %d", err, inits)
	}

	l = fake(map[string]string{"b.so": ""}, &inits)
	t.Setenv("KIMIMOE_TEST_FAKE_LIB", "/x/c.so")
	err := l.Open()
	if !errors.Is(err, errMissing) || !strings.Contains(err.Error(), "/x/c.so: not found") ||
		strings.Contains(err.Error(), "b.so") || !strings.Contains(err.Error(), "not a usable Fake") {
		t.Fatalf("only $KIMIMOE_TEST_FAKE_LIB is tried: %v", err)
	}

	t.Setenv("KIMIMOE_TEST_FAKE_LIB", "")
	l = fake(map[string]string{"a.so": "missing symbol fakeInit"}, &inits)
	err = l.Open()
	if !errors.Is(err, errMissing) || !strings.Contains(err.Error(), "a.so: missing symbol fakeInit") ||
		!strings.Contains(err.Error(), "b.so: not found") || !strings.Contains(err.Error(), "is it the Fake library?") {
		t.Fatalf("a wrong library is named as such: %v", err)
	}
	if l.Loaded() {
		t.Fatal("a failed Open reports the library loaded")
	}

	bad := errors.New("init failed")
	l = fake(map[string]string{"a.so": ""}, &inits)
	l.Init = func() error { return bad }
	if err := l.Open(); !errors.Is(err, errMissing) || !strings.Contains(err.Error(), "a.so: init failed") || l.Loaded() {
		t.Fatalf("a failed Init: %v", err)
	}
}
