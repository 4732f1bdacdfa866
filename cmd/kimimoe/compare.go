package main

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"kimimoe/moe"
)

// The performance issues ask for every kimimoe figure beside the peer's
// from the same device call; compare computes those ratios from the two
// JSON files of a run (bench --json and the peer script's
// peer_triton.json) instead of by hand.

// compareRow is one M present in both files.
type compareRow struct {
	M               int
	Path            string
	MS, FloorMS     float64 // kimimoe's median and the floor, ms
	XFloor          float64 // MS / FloorMS
	PeerMS          float64 // the peer's best CUDA-graph time, ms
	PeerOverKimimoe float64 // PeerMS / MS: above 1, kimimoe is ahead
}

// compareRows pairs the bench rows with the peer rows of the same M
// (peer rows without a time are skipped), in increasing M.
func compareRows(doc *benchDoc, peers *peerDoc) []compareRow {
	peer := map[int]float64{}
	for _, r := range peers.Rows {
		if r.GraphMS > 0 {
			peer[r.M] = r.GraphMS
		}
	}
	var rows []compareRow
	for _, r := range doc.Rows {
		p, ok := peer[r.M]
		if !ok || r.MedianMS <= 0 {
			continue
		}
		rows = append(rows, compareRow{M: r.M, Path: r.Path, MS: r.MedianMS, FloorMS: r.FloorMS,
			XFloor: r.MedianMS / r.FloorMS, PeerMS: p, PeerOverKimimoe: p / r.MedianMS})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].M < rows[j].M })
	return rows
}

// maxApart is how far apart the two files' dates may be and still come
// from one call: gpu-check.sh runs the peer script a few minutes after
// the bench.
const maxApart = 30 * time.Minute

// runCompare prints kimimoe's bench rows beside the peer's.
func runCompare(args []string) error {
	fs := newFlags("compare", "--bench bench.json --peers peer_triton.json [--markdown] [--any-time]")
	benchPath := fs.String("bench", "", "JSON written by kimimoe bench --json")
	peersPath := fs.String("peers", "", "JSON written by the peer script (peer_triton.json)")
	markdown := fs.Bool("markdown", false, "print a Markdown table (for docs/PERF.md)")
	anyTime := fs.Bool("any-time", false, fmt.Sprintf("compare files more than %v apart (not one call)", maxApart))
	if err := parse(fs, args); err != nil {
		return err
	}
	if *benchPath == "" || *peersPath == "" {
		return usagef("--bench and --peers are required")
	}
	var doc benchDoc
	var peers peerDoc
	if err := readJSON(*benchPath, &doc); err != nil {
		return asUsage(err)
	}
	if err := readJSON(*peersPath, &peers); err != nil {
		return asUsage(err)
	}
	if err := doc.check(*benchPath); err != nil {
		return err
	}
	if err := peers.check(*peersPath); err != nil {
		return err
	}
	if kimi := moe.KimiK3(); (doc.K != 0 && doc.K != kimi.K) || (doc.N != 0 && doc.N != kimi.N) {
		return usagef("%s: benched at K=%d N=%d; the peer runs Kimi's K=%d N=%d", *benchPath, doc.K, doc.N, kimi.K, kimi.N)
	}
	if !*anyTime {
		if err := sameCall(doc.Date, peers.DateUTC); err != nil {
			return usagef("%s and %s: %v (--any-time to compare them anyway)", *benchPath, *peersPath, err)
		}
	}
	rows := compareRows(&doc, &peers)
	if len(rows) == 0 {
		return usagef("%s and %s have no token count M in common", *benchPath, *peersPath)
	}
	fmt.Fprintf(os.Stdout, "kimimoe %s on %s (%s) against the peer on %s (%s)\n", doc.Backend, doc.Device, doc.Date, peers.Device, peers.DateUTC)
	timing := doc.Timing
	if timing == "" {
		timing = "not recorded in its file (written before bench recorded it: docs/PERF.md says how it was timed)"
	}
	peerTiming := strings.SplitN(peers.Timing, ";", 2)[0] // its method, before the script's notes
	if peerTiming == "" {
		peerTiming = "not recorded in its file"
	}
	fmt.Fprintf(os.Stdout, "timing: kimimoe %s; the peer %s\n", timing, peerTiming)
	if *markdown {
		fmt.Fprintln(os.Stdout, "\n| M | path | kimimoe ms | floor ms | x floor | peer ms (graph) | peer / kimimoe |")
		fmt.Fprintln(os.Stdout, "| --- | --- | --- | --- | --- | --- | --- |")
		for _, r := range rows {
			fmt.Fprintf(os.Stdout, "| %d | %s | %.4f | %.4f | %.2f | %.3f | %.2f |\n", r.M, r.Path, r.MS, r.FloorMS, r.XFloor, r.PeerMS, r.PeerOverKimimoe)
		}
		return nil
	}
	fmt.Fprintf(os.Stdout, "%6s  %-10s %10s %9s %8s %9s %15s\n", "M", "path", "kimimoe ms", "floor ms", "x floor", "peer ms", "peer / kimimoe")
	for _, r := range rows {
		fmt.Fprintf(os.Stdout, "%6d  %-10s %10.4f %9.4f %8.2f %9.3f %15.2f\n", r.M, r.Path, r.MS, r.FloorMS, r.XFloor, r.PeerMS, r.PeerOverKimimoe)
	}
	return nil
}

// sameCall says why two RFC 3339 dates cannot be one device call (nil if
// they can).
func sameCall(a, b string) error {
	ta, err := time.Parse(time.RFC3339, a)
	if err != nil {
		return fmt.Errorf("bench date %q: %w", a, err)
	}
	tb, err := time.Parse(time.RFC3339, b)
	if err != nil {
		return fmt.Errorf("peer date %q: %w", b, err)
	}
	if d := ta.Sub(tb).Abs(); d > maxApart {
		return fmt.Errorf("measured %v apart, not in one call", d.Round(time.Second))
	}
	return nil
}
