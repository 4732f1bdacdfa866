# Sourced by the bench scripts from the repository root: sets km, the
# kimimoe command, built from this checkout where go is on PATH (so the
# figures name its commit), else $KIMIMOE or the kimimoe on PATH.
if command -v go >/dev/null; then
  go build -buildvcs=true -o /tmp/kimimoe-bench ./cmd/kimimoe || exit 1
  KIMIMOE=/tmp/kimimoe-bench
fi
km=${KIMIMOE:-kimimoe}
