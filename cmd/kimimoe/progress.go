package main

import (
	"fmt"
	"os"
	"time"
)

// progress prints a one-line status on stderr, only when stderr is a
// terminal, and only once work has gone on for a second (short work stays
// quiet).
type progress struct {
	tty   bool
	steps bool // a line per step on stderr, terminal or not (long work)
	start time.Time
	shown bool
}

func newProgress() *progress {
	st, err := os.Stderr.Stat()
	return &progress{tty: err == nil && st.Mode()&os.ModeCharDevice != 0, start: time.Now()}
}

func (p *progress) update(format string, a ...any) {
	if p.steps {
		fmt.Fprintf(os.Stderr, "[%5.1fs] %s\n", time.Since(p.start).Seconds(), fmt.Sprintf(format, a...))
		return
	}
	if !p.tty || time.Since(p.start) < time.Second {
		return
	}
	p.shown = true
	fmt.Fprintf(os.Stderr, "\r\033[K[%5.1fs] %s", time.Since(p.start).Seconds(), fmt.Sprintf(format, a...))
}

// clear erases the status line (before printing a result line).
// stepProgress is a progress for long work (minutes): on a terminal the
// status line, otherwise a line per step, so that a piped run shows it is
// alive.
func stepProgress() *progress {
	p := newProgress()
	p.steps = !p.tty
	return p
}

func (p *progress) clear() {
	if p.shown {
		fmt.Fprint(os.Stderr, "\r\033[K")
	}
}

func (p *progress) done() {
	if p.shown {
		fmt.Fprint(os.Stderr, "\r\033[K")
	}
}
