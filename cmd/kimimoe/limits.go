package main

import (
	"fmt"
	"strconv"
	"strings"
)

// maxTokens bounds every --m value: far above any real batch, and small
// enough that the sizes derived from it cannot overflow.
const maxTokens = 1 << 20

// parseTokenCounts parses a comma-separated --m list, checking every value
// before any work starts.
func parseTokenCounts(s string) ([]int, error) {
	var ms []int
	for _, f := range strings.Split(s, ",") {
		m, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || m < 1 || m > maxTokens {
			return nil, usagef("--m: %q is not a token count from 1 to %d", f, maxTokens)
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// checkMemory refuses work whose estimated memory is over the limit set
// with --max-memory-gib, naming what needs it.
func checkMemory(what string, bytes float64, limitGiB float64) error {
	if gib := bytes / (1 << 30); gib > limitGiB {
		return usagef("%s needs about %s of memory, over the --max-memory-gib limit of %s (raise the limit to run it anyway)", what, byteSize(bytes), byteSize(limitGiB*(1<<30)))
	}
	return nil
}

// byteSize formats a byte count with a unit that keeps it readable.
func byteSize(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.3g GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.3g MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.3g KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f bytes", b)
}

// oracleBytes estimates the oracle's memory for a layer of e experts
// (decode tables: one byte per weight element, plus the packed weights and
// scales) and a forward with pairs local (token, slot) pairs and m rows.
func oracleBytes(e, n, k int, gated bool, m, pairs int) float64 {
	rows := float64(n)
	if gated {
		rows *= 2
	}
	weights := float64(e) * (rows + float64(n)) * float64(k) * (1 + 0.5 + 1.0/32)
	return weights + float64(pairs)*float64(k)*8 + float64(m)*float64(k)*(4+8+8)
}
