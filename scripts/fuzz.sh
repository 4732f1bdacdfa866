#!/usr/bin/env bash
# Run every fuzz target for SECONDS each (default 60):
#   bash scripts/fuzz.sh 300
# Minimization is bounded by executions, not time, so that a burst of new
# inputs does not stall the run. A crasher is written under the package's
# testdata/fuzz/<Target>/ (commit it: `go test` then replays it forever)
# and the script exits non-zero. The last line per target gives its
# executions.
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
status=0
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
    log=$(mktemp)
    if go test "$pkg" -run '^$' -fuzz "^${target}\$" -fuzztime "${secs}s" -fuzzminimizetime 100x >"$log" 2>&1; then
      result=ok
    else
      result=FAILED; status=1
    fi
    execs=$(grep -o 'execs: [0-9]*' "$log" | tail -1)
    echo "$pkg $target: $result ($execs in ${secs}s)"
    [ "$result" = ok ] || grep -v '^fuzz: elapsed' "$log" | head -40
    rm -f "$log"
  done
done
exit $status
