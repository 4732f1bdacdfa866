#!/usr/bin/env bash
# The oracle's contract promises separately rounded multiplies and adds
# (docs/CONTRACT.md "Exactness"). Go fuses x*y+z into one FMA instruction on
# arm64 (and other FMA targets) unless an explicit conversion forbids it,
# which would change the oracle's bits on Grace hosts. This builds the
# numeric packages for arm64 and fails if their code contains a fused
# multiply-add.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(./mxfp ./activation ./moe ./validation)
out=$(GOARCH=arm64 go build -gcflags=-S "${pkgs[@]}" 2>&1)
if [ -z "$out" ]; then
  echo "check-fma: no compiler output (did the build run?)"; exit 1
fi
# Only our own source lines count: code inlined from dependencies (gonum's
# dot product in the metrics) is not part of the contract.
root=$(pwd)
fused=$(printf '%s\n' "$out" | grep -E '\b(FMADD|FMSUB|FNMADD|FNMSUB)[DS]\b' | grep -F "($root/" || true)
if [ -n "$fused" ]; then
  echo "check-fma: fused multiply-add in the numeric packages (use float64()/float32() around the product):"
  printf '%s\n' "$fused"
  exit 1
fi
echo "check-fma: no fused multiply-add in ${pkgs[*]} for arm64"
