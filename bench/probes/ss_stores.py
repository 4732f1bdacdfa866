# Question: can a producer that widens the weights into shared memory feed SS wgmmas at the register-fed loop's rate?
# The design docs/PERF.md weighed for prefill: a producer warpgroup widens
# each 64-row group's MXFP4 weights to BF16 into shared memory and the MMA
# warpgroups issue SS wgmmas (both operands from shared memory), where the
# path today widens into registers and issues RS wgmmas (only the tokens
# from shared memory). Per m64nNk16 wgmma the SS form reads the 2 KB A
# tile as well as the N x 32-byte token tile, and the producer writes the
# same 2 KB: this probe times the bare loop three ways, nothing else in
# it (wgmma_rate.py's harness and loop: a 64-k chunk's four wgmmas, commit,
# wait for the group before), one CTA an SM:
#   RS     A from registers (the path's MMAs)
#   SS     A from shared memory
#   SS+st  SS, and each thread stores 16 bytes a wgmma elsewhere in shared
#          memory: the producer's 2 KB a warpgroup a wgmma, written here by
#          the MMA warps themselves (the same shared-memory traffic)
# Run on the GPU machine: python3 bench/probes/ss_stores.py [N,N,...]
# Output: a line per (mode, N, warpgroups an SM): cycles a wgmma an SM
# and the share of the dense BF16 rate, as wgmma_rate.py prints them.
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wgmma_rate import run, source, start

def store(n, wgs):
    # 16 bytes a thread a wgmma past the operands: the producer's writes.
    return ('asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" :: '
            f'"r"(base + {n} * 128 + {wgs} * 8192 + wg * 8192 + (threadIdx.x % 128) * 16 + q * 2048), '
            '"r"(a[0] + it), "r"(a[1]), "r"(a[2]), "r"(a[3]) : "memory");')

def main():
    sms, ns = start("128,256", "dense BF16 rate 4096 FLOP a cycle an SM")
    print(f"{'mode':>6} {'N':>4} {'WG/SM':>5} {'cyc/wgmma/SM':>13} {'% dense':>8} {'TFLOP/s':>8}")
    for n in ns:
        for wgs in (2, 3):
            if n == 256 and wgs == 3:
                continue  # registers
            for mode in ("RS", "SS", "SS+st"):
                src = source(n, mode == "RS", wgs, store(n, wgs) if mode == "SS+st" else "")
                per, per_sm, tf = run(n, mode == "RS", wgs, sms, src=src)
                print(f"{mode:>6} {n:>4} {wgs:>5} {per:>13.2f} {100 * per_sm / 4096:>7.1f}% {tf:>8.1f}", flush=True)

if __name__ == "__main__":
    main()
