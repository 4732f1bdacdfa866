#!/usr/bin/env bash
# The main loops' SASS instruction mix (docs/PERF.md, "What limits each
# range"): for each named kernel of the sm_90a program, the innermost
# loop that holds the most wgmmas (HGMMA), of the widest shape where a
# fitted kernel has a loop per N, found as the span of a backward
# branch, its instructions counted by opcode (static: one pass of the
# loop body as ptxas laid it out, which the k loop repeats once a step
# or two).
#
#   bash bench/sass.sh [KERNELS]   (default the 128-token GEMMs; needs cuobjdump)
#
# A kernel with no wgmma in a loop gets no mix, only its listing in
# SASS_OUT.
#
# The program is compiled into a cache of its own (about 2 minutes of
# NVRTC) unless SASS_CACHE names a folder that holds only this commit's
# cubins (e.g. the KIMIMOE_CACHE of a fresh machine after bench/run.sh).
# SASS_OUT, if set, is a folder that receives each kernel's loop listing.
set -uo pipefail
cd "$(dirname "$0")/.."
kernels=${1:-kmoe_f4_gemm1_w3rf_t128,kmoe_f4_gemm2_w3rf_t128,kmoe_f4_gemm2_t128}
. bench/kimimoe.sh # km: the command
cache=${SASS_CACHE:-}
[ -z "${SASS_OUT:-}" ] || mkdir -p "$SASS_OUT" || exit 1
if [ -z "$cache" ]; then
  cache=$(mktemp -d) || exit 1
  KIMIMOE_CACHE=$cache "$km" bench --backend cuda --m 1 --rounds 1 --warmup 0 >/dev/null || { echo "kimimoe bench failed" >&2; exit 1; }
fi
date -u
"$km" --version
for k in ${kernels//,/ }; do
  found=
  # A cache entry is a 32-byte SHA-256 of the cubin, then the cubin. The
  # cache may also hold other architectures' programs (the tests compile
  # the sm_120a body) and the tests' module: the sm_90a program is taken.
  for f in $(ls -t "$cache"/*.cubin 2>/dev/null); do
    tmp=$(mktemp --suffix=.cubin) || exit 1
    tail -c +33 "$f" >"$tmp"
    if cuobjdump -sass -fun "$k" "$tmp" >"$tmp.sass" 2>/dev/null && grep -Eq "Function : $k[[:space:]]*$" "$tmp.sass" &&
      grep -q "code for sm_90a" "$tmp.sass"; then
      found=$tmp.sass
      rm -f "$tmp"
      break
    fi
    rm -f "$tmp" "$tmp.sass"
  done
  if [ -z "$found" ]; then
    echo "== $k: not in the cubins of $cache"
    continue
  fi
  echo "== $k"
  python3 - "$found" "$k" "${SASS_OUT:-}" <<'PY'
import collections, os, re, sys
path, name, out = sys.argv[1:4]
labels, insts = {}, []  # label -> index of the next instruction; (address, text)
for line in open(path):
    m = re.match(r"\s*(\.L_x_\d+):", line)
    if m:
        labels[m.group(1)] = len(insts)
        continue
    m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
    if m:
        insts.append((int(m.group(1), 16), m.group(2)))
def opcode(text):
    t = re.sub(r"^@!?U?P\w+\s+", "", text)  # the guard predicate
    return t.split()[0].split(".")[0]
at = {a: i for i, (a, _) in enumerate(insts)}
loops = []
for i, (_, text) in enumerate(insts):
    # cuobjdump names a branch's target by its address (BRA 0x1230),
    # nvdisasm by a label (BRA `(.L_x_12)).
    m = re.search(r"\bBRA(?:\.\w+)*\s+(?:[^,`]*,\s*)?(?:0x([0-9a-f]+)|`\((\.L_x_\d+)\))", text)
    if not m:
        continue
    start = at.get(int(m.group(1), 16)) if m.group(1) else labels.get(m.group(2))
    if start is not None and start <= i:
        body = insts[start:i + 1]
        n = sum(opcode(text) == "HGMMA" for _, text in body)
        if n:
            wide = max((int(w) for _, text in body for w in re.findall(r"HGMMA\.64x(\d+)x", text)), default=0)
            loops.append((n, wide, start, i, body))
# The innermost loops (no other loop with a wgmma inside), then the one
# of the most wgmmas, of the widest shape (a fitted kernel has a loop per
# N, and a branch may span several of them).
loops = [l for l in loops if not any(o is not l and l[2] <= o[2] and o[3] <= l[3] for o in loops)]
if not loops:
    print(f"no loop of {len(insts)} instructions holds a wgmma")
    if out:
        with open(os.path.join(out, name + ".sass"), "w") as f:
            f.writelines(f"/*{a:04x}*/ {t} ;\n" for a, t in insts)
    sys.exit(0)
mmas, wide, _, _, body = max(loops, key=lambda l: (l[0], l[1], -len(l[4])))
if out:
    with open(os.path.join(out, name + ".loop.sass"), "w") as f:
        f.writelines(f"/*{a:04x}*/ {t} ;\n" for a, t in body)
count = collections.Counter(opcode(t) for _, t in body)
print(f"loop of {len(body)} instructions, {mmas} HGMMA (N = {wide}), at {body[0][0]:#x}..{body[-1][0]:#x}")
print(f"{'opcode':<10} {'count':>6} {'share':>7}")
for op, n in count.most_common():
    print(f"{op:<10} {n:>6} {100 * n / len(body):>6.1f}%")
PY
  rm -f "$found"
done
