package main

import (
	"cmp"
	"fmt"
	"os"
	"sort"
	"time"

	"kimimoe/moe"
)

// The performance issues ask for every kimimoe figure beside the peer's
// from the same device call; compare computes those ratios from the two
// JSON files of a run (bench --json and the peer script's
// peer_triton.json) instead of by hand.

// compareRow is one M of the bench with a time from at least one peer.
type compareRow struct {
	M               int
	Path            string
	MS, FloorMS     float64   // kimimoe's median and the floor, ms
	XFloor          float64   // MS / FloorMS
	PeerMS          []float64 // each peer's best CUDA-graph time, ms (0: none at this M)
	PeerOverKimimoe []float64 // PeerMS / MS: above 1, kimimoe is ahead
}

// best is the index of the fastest peer at this M (-1: none has a time).
func (r *compareRow) best() int {
	b := -1
	for j, ms := range r.PeerMS {
		if ms > 0 && (b < 0 || ms < r.PeerMS[b]) {
			b = j
		}
	}
	return b
}

// compareRows pairs the bench rows with the peers' rows of the same M
// (peer rows without a time are skipped), in increasing M.
func compareRows(doc *benchDoc, peers []*peerDoc) []compareRow {
	times := make([]map[int]float64, len(peers))
	for j, pd := range peers {
		times[j] = map[int]float64{}
		for i, r := range pd.Rows {
			if t := pd.ms(i); t > 0 {
				times[j][r.M] = t
			}
		}
	}
	var rows []compareRow
	for _, r := range doc.Rows {
		if r.MedianMS <= 0 {
			continue
		}
		row := compareRow{M: r.M, Path: r.Path, MS: r.MedianMS, FloorMS: r.FloorMS, XFloor: r.MedianMS / r.FloorMS}
		any := false
		for j := range peers {
			p := times[j][r.M]
			row.PeerMS = append(row.PeerMS, p)
			row.PeerOverKimimoe = append(row.PeerOverKimimoe, p/r.MedianMS)
			any = any || p > 0
		}
		if any {
			rows = append(rows, row)
		}
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
	fs := newFlags("compare", "--bench bench.json --peers peer.json[,peer2.json] [--markdown] [--any-time]")
	benchPath := fs.String("bench", "", "JSON written by kimimoe bench --json")
	peersPath := fs.String("peers", "", "JSONs written by the peer scripts of the same call, comma-separated (bench/README.md)")
	markdown := fs.Bool("markdown", false, "print a Markdown table (for docs/PERF.md)")
	anyTime := fs.Bool("any-time", false, fmt.Sprintf("compare files more than %v apart (not one call)", maxApart))
	if err := parse(fs, args); err != nil {
		return err
	}
	if *benchPath == "" || *peersPath == "" {
		return usagef("--bench and --peers are required")
	}
	doc, peers, err := readBenchPeers(*benchPath, *peersPath)
	if err != nil {
		return err
	}
	if !*anyTime {
		for _, pd := range peers {
			if err := sameCall(doc.Date, pd.when()); err != nil {
				return usagef("%s and %s's file: %v (--any-time to compare them anyway)", *benchPath, pd.name(), err)
			}
		}
	}
	rows := compareRows(doc, peers)
	if len(rows) == 0 {
		return usagef("%s and %s have no token count M in common", *benchPath, *peersPath)
	}
	timing := doc.Timing
	if timing == "" {
		timing = "not recorded in its file"
	}
	fmt.Fprintf(os.Stdout, "kimimoe %s on %s (%s); timing: %s\n", doc.Backend, doc.Device, doc.Date, timing)
	for _, pd := range peers {
		t := pd.timing()
		if t == "" {
			t = "not recorded in its file"
		}
		fmt.Fprintf(os.Stdout, "peer %s on %s (%s); timing: %s\n", pd.name(), pd.Device, pd.when(), t)
	}
	if *markdown {
		head, rule := "| M | path | kimimoe ms | floor ms | x floor |", "| --- | --- | --- | --- | --- |"
		for _, pd := range peers {
			head += fmt.Sprintf(" %s ms (graph) | %s / kimimoe |", pd.name(), pd.name())
			rule += " --- | --- |"
		}
		if len(peers) > 1 {
			head += " best peer | best / kimimoe |"
			rule += " --- | --- |"
		}
		fmt.Fprintln(os.Stdout, "\n"+head)
		fmt.Fprintln(os.Stdout, rule)
		for _, r := range rows {
			fmt.Fprintf(os.Stdout, "| %d | %s | %.4f | %.4f | %.2f |", r.M, r.Path, r.MS, r.FloorMS, r.XFloor)
			for j := range peers {
				if r.PeerMS[j] > 0 {
					fmt.Fprintf(os.Stdout, " %.3f | %.2f |", r.PeerMS[j], r.PeerOverKimimoe[j])
				} else {
					fmt.Fprint(os.Stdout, " - | - |")
				}
			}
			if len(peers) > 1 {
				if b := r.best(); b >= 0 {
					fmt.Fprintf(os.Stdout, " %s | %.2f |", peers[b].name(), r.PeerOverKimimoe[b])
				} else {
					fmt.Fprint(os.Stdout, " - | - |")
				}
			}
			fmt.Fprintln(os.Stdout)
		}
		return nil
	}
	fmt.Fprintf(os.Stdout, "%6s  %-10s %10s %9s %8s", "M", "path", "kimimoe ms", "floor ms", "x floor")
	for j := range peers {
		fmt.Fprintf(os.Stdout, " %9s %8s", fmt.Sprintf("peer%d ms", j+1), "ratio")
	}
	fmt.Fprintln(os.Stdout)
	for _, r := range rows {
		fmt.Fprintf(os.Stdout, "%6d  %-10s %10.4f %9.4f %8.2f", r.M, r.Path, r.MS, r.FloorMS, r.XFloor)
		for j := range peers {
			fmt.Fprintf(os.Stdout, " %9.3f %8.2f", r.PeerMS[j], r.PeerOverKimimoe[j])
		}
		fmt.Fprintln(os.Stdout)
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

// readBenchPeers reads a bench JSON and the peers' JSONs (a comma-separated
// list, possibly empty), refusing a peer that ran another layer (K, N)
// than the bench: its times beside ours would compare two workloads.
func readBenchPeers(benchPath, peersPath string) (*benchDoc, []*peerDoc, error) {
	var doc benchDoc
	if err := readJSON(benchPath, &doc); err != nil {
		return nil, nil, asUsage(err)
	}
	if err := doc.check(benchPath); err != nil {
		return nil, nil, err
	}
	peers, err := readPeers(peersPath)
	if err != nil {
		return nil, nil, err
	}
	kimi := moe.KimiK3()
	if err := samePeerLayer(benchPath, cmp.Or(doc.K, kimi.K), cmp.Or(doc.N, kimi.N), peers); err != nil {
		return nil, nil, err
	}
	return &doc, peers, nil
}

// samePeerLayer refuses a peer whose file ran another (K, N) than the
// bench named what (a file, or the run) at K, N.
func samePeerLayer(what string, k, n int, peers []*peerDoc) error {
	for _, pd := range peers {
		if pk, pn := pd.shape(); pk != k || pn != n {
			return usagef("%s: benched at K=%d N=%d; %s's file ran K=%d N=%d", what, k, n, pd.name(), pk, pn)
		}
	}
	return nil
}
