// Package dl finds and loads a shared library once per process: from the
// path an environment variable names (and only it), else from a list of
// default names. The loading itself (dlopen and dlsym into a table) is
// the caller's, in cgo, through the macros of dl.h, which the driver's,
// NVRTC's and NCCL's loaders include; this package holds the policy and
// the messages, so it needs no cgo and is tested without a GPU.
//
// A library is loaded at most once and never unloaded: there is no
// reference count to get wrong, and a compile on one goroutine cannot race
// a Close on another.
package dl

import (
	"fmt"
	"os"
	"strings"
	"sync"
)

// Library is one optional shared library.
type Library struct {
	Name     string          // in messages: "NVRTC", "CUDA driver"
	Env      string          // the variable that names its path
	Defaults func() []string // the names tried, in order, without Env
	// Load opens path and resolves the symbols; "" on success, else why
	// not (dlerror's text, or "missing symbol NAME").
	Load func(path string) (why string)
	// Init, if set, runs once after a successful Load (cuInit).
	Init    func() error
	Missing error // the sentinel every failure wraps

	mu sync.Mutex
	ok bool
}

// Candidates are the paths Open tries: $Env alone if set, else Defaults.
func (l *Library) Candidates() []string {
	if p := os.Getenv(l.Env); p != "" {
		return []string{p}
	}
	return l.Defaults()
}

// Loaded reports whether Open has succeeded in this process.
func (l *Library) Loaded() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ok
}

// Open loads the library, once per process: the first candidate that
// loads (and initializes). Otherwise it returns an error wrapping Missing
// with every candidate's reason and a hint.
func (l *Library) Open() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ok {
		return nil
	}
	var tried []string
	hint := "set " + l.Env + " to its path"
	for _, p := range l.Candidates() {
		why := l.Load(p)
		if why == "" {
			if l.Init != nil {
				if err := l.Init(); err != nil {
					return fmt.Errorf("%w: %s: %v", l.Missing, p, err)
				}
			}
			l.ok = true
			return nil
		}
		if strings.HasPrefix(why, "missing symbol") {
			hint = "is it the " + l.Name + " library?"
		}
		tried = append(tried, p+": "+why)
	}
	if os.Getenv(l.Env) != "" && !strings.HasPrefix(hint, "is it") {
		hint = l.Env + " names a library that is not a usable " + l.Name
	}
	return fmt.Errorf("%w (%s; %s)", l.Missing, strings.Join(tried, "; "), hint)
}
