#!/usr/bin/env python3
"""Peer measurement: the strongest Triton MoE a user could pick for kimimoe's workload, on the H200.

Workload (Kimi-K3 EP32 local shape, chain `mxfp8`, recipe `floor`):
  E=28 local experts, K=3584 (hidden), N=3072 (expert intermediate), 8 local slots per token
  (distinct experts, uniform, seeded), slot weights sum to 1.
  x   [M, K]   MXFP8: float8_e4m3fn payload + E8M0 byte per 32 along K (floor recipe).
  w31 [E,2N,K] MXFP4: uint8 [E, 2N, K/2] (element 2j in the low nibble) + E8M0 [E, 2N, K/32];
               rows 0..N-1 are up, N..2N-1 are gate.
  w2  [E,K,N]  MXFP4: uint8 [E, K, N/2] + E8M0 [E, K, N/32].
  h = x @ w31[e]^T; a = 4 tanh(g/4) sigmoid(g) * 25 tanh(u/25) (u = h[:N], g = h[N:]);
  aq = MXFP8(a) (floor recipe); y = aq @ w2[e]^T; out[t] = sum over slots of weight * y.

Peers:
  1. Triton: (token, slot) pairs sorted by expert and padded to BLOCK_M (torch, no host sync);
     FC1 grouped GEMM with both up and gate tiles in one program, SiTU and the MXFP8 requant fused
     in the epilogue; FC2 grouped GEMM with the routing weight folded in, bf16 per-pair rows;
     the per-token sum in torch. GEMM core: tl.dot_scaled(x, xs, 'e4m3', w, ws, 'e2m1') where it
     compiles and is correct (on sm_90 Triton emulates it: upcast to bf16 + wgmma/mma), else an
     explicit in-kernel dequantization to bf16 + tl.dot ('dequant').
  2. torch._scaled_grouped_mm with FP8 rowwise scales (float8_e4m3fn operands, float32 scales per
     row, int32 group ends), activation and requantization in torch.

Correctness: against a float32 torch reference on the same quantized data (dequantized with the
scales, same MXFP8 requant of the intermediate), ||out - ref|| / ||ref|| on all 128 tokens at
M=128 and on the first 128 tokens at larger M; a time counts only when that is below 1e-2.
Timing: triton.testing.do_bench, median, after warm-up (L2 flushed between repetitions).

On a GPU machine, run by bench/run.sh right after `kimimoe bench`:
         PEER_MS=1,8,128 python3 bench/peer_moe.py   (writes $OUT/peer_triton.json and $OUT/peer_log.txt;
         PEER_MS lists the token counts; PEER_BUDGET_S caps its time, default 240 s; about 70 s on an H200)
Locally: python3 bench/peer_moe_local.py   (CPU, tiny shapes, no Triton: checks the routing
         layout, the epilogue quantizer and a pointer-level emulation of both kernels)
"""
import json
import math
import os
import sys
import time
import traceback

T_START = time.time()
LOCAL = os.environ.get("PEER_LOCAL_TEST") == "1"
BUDGET_S = float(os.environ.get("PEER_BUDGET_S", "240"))
OUT = os.environ.get("OUT") or "peer_out"
os.makedirs(OUT, exist_ok=True)
_LOG = open(os.path.join(OUT, "peer_log.txt"), "w")


def log(*args):
    s = "[%6.1fs] " % (time.time() - T_START) + " ".join(str(a) for a in args)
    print(s, flush=True)
    _LOG.write(s + "\n")
    _LOG.flush()


def time_left():
    return BUDGET_S - (time.time() - T_START)


import torch  # noqa: E402

try:
    import triton
    import triton.language as tl
    HAVE_TRITON = True
except Exception:  # local test machine
    HAVE_TRITON = False

if LOCAL:
    E, K, N, TOPK = 5, 256, 128, 3
    DEV = "cpu"
else:
    E, K, N, TOPK = 28, 3584, 3072, 8
    DEV = "cuda"
BK = 128
GROUP_M = 8
MS = [int(v) for v in os.environ.get("PEER_MS", "1,128,512,2048,8192").split(",")]
HAS_F8 = hasattr(torch, "float8_e4m3fn") and not LOCAL
F8 = torch.float8_e4m3fn if HAS_F8 else torch.float32
E2M1_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


# ----------------------------------------------------------------------------------------------
# numerics helpers (torch)
# ----------------------------------------------------------------------------------------------
def pow2_from_byte(s):
    """E8M0 byte -> float32 2^(s-127)."""
    return torch.exp2(s.to(torch.float32) - 127.0)


def unpack_e2m1(p):
    """uint8 [..., C/2] (element 2j low nibble) -> float32 values [..., C]."""
    lut = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=p.device)
    lo = lut[(p & 0xF).long()]
    hi = lut[(p >> 4).long()]
    return torch.stack([lo, hi], dim=-1).reshape(*p.shape[:-1], p.shape[-1] * 2)


def deq_mxfp4(p, s):
    v = unpack_e2m1(p)
    R, C = v.shape
    return (v.view(R, C // 32, 32) * pow2_from_byte(s)[..., None]).view(R, C)


def round_e4m3_emul(x):
    """RNE to E4M3 for |x| <= 448 (CPU emulation where torch has no float8)."""
    _, ex = torch.frexp(x.abs().clamp(min=2.0 ** -6))
    ulp = torch.exp2((ex - 1 - 3).to(torch.float32))
    return torch.round(x / ulp) * ulp


def to_e4m3(x):
    return x.to(torch.float8_e4m3fn) if HAS_F8 else round_e4m3_emul(x)


def mx8_quant_ref(a):
    """MXFP8 floor recipe (OCP): X = floor(log2 amax) - 8, clamp [-127, 127], zero block -> 0x00."""
    R, C = a.shape
    b = a.reshape(R, C // 32, 32)
    amax = b.abs().amax(dim=-1)
    _, ex = torch.frexp(amax)
    X = (ex.to(torch.int32) - 9).clamp(-127, 127)
    X = torch.where(amax == 0, torch.full_like(X, -127), X)
    q = (b * torch.exp2(-X.to(torch.float32))[..., None]).clamp(-448.0, 448.0)
    return to_e4m3(q).reshape(R, C), (X + 127).to(torch.uint8)


def mx8_quant_bits(a):
    """The kernel epilogue's quantizer, written with the same bit operations."""
    R, C = a.shape
    b = a.reshape(R, C // 32, 32).contiguous()
    amax = b.abs().amax(dim=-1).contiguous()
    be = (amax.view(torch.int32) >> 23) & 0xFF
    sb = (be - 8).clamp(0, 254)
    mult = ((254 - sb) << 23).contiguous().view(torch.float32)
    q = (b * mult[..., None]).clamp(-448.0, 448.0)
    return to_e4m3(q).reshape(R, C), sb.to(torch.uint8)


def mx8_dequant(q, sb):
    R, C = q.shape
    return (q.float().reshape(R, C // 32, 32) * pow2_from_byte(sb)[..., None]).reshape(R, C)


def situ(g, u):
    return 4.0 * torch.tanh(g / 4.0) * torch.sigmoid(g) * (25.0 * torch.tanh(u / 25.0))


def rel_err(out, ref):
    return float(torch.linalg.norm((out.float() - ref.float()).flatten()) / torch.linalg.norm(ref.float().flatten()))


# ----------------------------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------------------------
def make_weights(seed=1234):
    g = torch.Generator(device=DEV)
    g.manual_seed(seed)
    W = {
        "w31p": torch.randint(0, 256, (E, 2 * N, K // 2), dtype=torch.uint8, device=DEV, generator=g),
        "w31s": torch.randint(119, 123, (E, 2 * N, K // 32), dtype=torch.uint8, device=DEV, generator=g),
        "w2p": torch.randint(0, 256, (E, K, N // 2), dtype=torch.uint8, device=DEV, generator=g),
        "w2s": torch.randint(119, 123, (E, K, N // 32), dtype=torch.uint8, device=DEV, generator=g),
    }
    # float32 dequantized copies for the reference (built one expert at a time)
    W["w31d"] = torch.empty(E, 2 * N, K, dtype=torch.float32, device=DEV)
    W["w2d"] = torch.empty(E, K, N, dtype=torch.float32, device=DEV)
    for e in range(E):
        W["w31d"][e] = deq_mxfp4(W["w31p"][e], W["w31s"][e])
        W["w2d"][e] = deq_mxfp4(W["w2p"][e], W["w2s"][e])
    return W


def make_inputs(M, seed):
    g = torch.Generator(device=DEV)
    g.manual_seed(seed)
    x = torch.randn(M, K, generator=g, device=DEV)
    xq, xs = mx8_quant_ref(x)
    ids = torch.rand(M, E, generator=g, device=DEV).argsort(dim=1)[:, :TOPK].to(torch.int32).contiguous()
    tw = torch.rand(M, TOPK, generator=g, device=DEV) + 0.05
    tw = (tw / tw.sum(dim=1, keepdim=True)).contiguous()
    return {"M": M, "xq": xq.contiguous(), "xs": xs.contiguous(), "x_deq": mx8_dequant(xq, xs),
            "topk_ids": ids, "tw": tw}


def reference(W, d, ntok, quant_a=True):
    """float32 reference on tokens [0, ntok): per expert, the pairs routed to it."""
    ids = d["topk_ids"][:ntok].long()
    tw = d["tw"][:ntok]
    xd = d["x_deq"][:ntok]
    out = torch.zeros(ntok, K, dtype=torch.float32, device=DEV)
    for e in range(E):
        t, s = (ids == e).nonzero(as_tuple=True)
        if t.numel() == 0:
            continue
        h = xd[t] @ W["w31d"][e].t()
        a = situ(h[:, N:], h[:, :N])
        if quant_a:
            q, sb = mx8_quant_ref(a)
            a = mx8_dequant(q, sb)
        y = a @ W["w2d"][e].t()
        out.index_add_(0, t, y * tw[t, s][:, None])
    return out


# ----------------------------------------------------------------------------------------------
# routing layout: pairs sorted by expert, each expert's run padded to BM (no host sync)
# ----------------------------------------------------------------------------------------------
def prep(topk_ids, BM):
    M = topk_ids.shape[0]
    P = M * TOPK
    dev = topk_ids.device
    flat = topk_ids.reshape(-1).long()
    sorted_e, order = torch.sort(flat, stable=True)
    counts = torch.zeros(E, dtype=torch.long, device=dev).scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + BM - 1) // BM * BM
    pad_end = torch.cumsum(padded, 0)
    pad_start = pad_end - padded
    start = torch.cumsum(counts, 0) - counts
    pos = pad_start[sorted_e] + (torch.arange(P, device=dev) - start[sorted_e])
    max_pad = (P + E * (BM - 1) + BM - 1) // BM * BM
    sid = torch.full((max_pad,), P, dtype=torch.int32, device=dev)
    sid[pos] = order.to(torch.int32)
    nblk = max_pad // BM
    eid = torch.searchsorted(pad_end, torch.arange(nblk, device=dev) * BM, right=True)
    eid = torch.where(eid < E, eid, torch.full_like(eid, -1)).to(torch.int32)
    return sid, eid, nblk, max_pad


def tile_ids(pid, num_m_blocks, num_n, group_m):
    num_pid_in_group = group_m * num_n
    group_id = pid // num_pid_in_group
    first_m = group_id * group_m
    group_size = min(num_m_blocks - first_m, group_m)
    pid_m = first_m + (pid % num_pid_in_group) % group_size
    pid_n = (pid % num_pid_in_group) // group_size
    return pid_m, pid_n


# ----------------------------------------------------------------------------------------------
# Triton kernels
#   kinds (KIND_SPECS below):
#     dot_scaled_e4m3           x e4m3 + E8M0 scales as dot_scaled lhs, weights e2m1 rhs; intermediate MXFP8
#     dequant_e4m3              same data, explicit in-kernel dequantization to bf16 + tl.dot
#     dot_scaled_bf16act        x and the intermediate dequantized to bf16 once (MXFP8 values, exact in
#                               bf16) and fed as dot_scaled 'bf16' lhs; weights e2m1 rhs
#     dot_scaled_bf16act_swapab the same with A and B swapped: weights e2m1 are the lhs (rows of the
#                               wgmma M dimension), tokens the rhs/N dimension (small-M friendly)
# ----------------------------------------------------------------------------------------------
if HAVE_TRITON:
    @triton.jit
    def _pow2(s):
        # E8M0 byte -> float32 2^(s-127) (0x00 gives 0, not 2^-127)
        return (s.to(tl.int32) << 23).to(tl.float32, bitcast=True)

    @triton.jit
    def _e2m1(c):
        c = c.to(tl.int32)
        mag = (c & 7).to(tl.float32)
        v = tl.where(mag < 4.0, mag * 0.5, tl.where(mag < 6.0, mag - 2.0, mag * 2.0 - 8.0))
        return tl.where((c & 8) != 0, -v, v)

    @triton.jit
    def _tile_ids(pid, num_m_blocks, NUM_N: tl.constexpr, GM: tl.constexpr):
        num_pid_in_group = GM * NUM_N
        group_id = pid // num_pid_in_group
        first_m = group_id * GM
        group_size = tl.minimum(num_m_blocks - first_m, GM)
        pid_m = first_m + (pid % num_pid_in_group) % group_size
        pid_n = (pid % num_pid_in_group) // group_size
        return pid_m, pid_n

    @triton.jit(do_not_specialize=["num_pairs", "num_m_blocks"])
    def _fc1_kernel(x_ptr, xs_ptr, w_ptr, ws_ptr, sid_ptr, eid_ptr, a_ptr, as_ptr,
                    num_pairs, num_m_blocks,
                    N: tl.constexpr, K: tl.constexpr, TOPK: tl.constexpr,
                    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GM: tl.constexpr,
                    USE_DS: tl.constexpr, X_BF16: tl.constexpr, SWAP: tl.constexpr, A_MODE: tl.constexpr):
        # rows of block pid_m: pairs sid[pid_m*BM + i] of expert eid[pid_m]; columns n of up and N+n of gate
        pid_m, pid_n = _tile_ids(tl.program_id(0), num_m_blocks, N // BN, GM)
        e = tl.load(eid_ptr + pid_m)
        if e < 0:
            return
        e64 = e.to(tl.int64)
        offs_m = pid_m * BM + tl.arange(0, BM)
        pair = tl.load(sid_ptr + offs_m)
        tok = tl.where(pair < num_pairs, pair // TOPK, 0).to(tl.int64)
        offs_n = pid_n * BN + tl.arange(0, BN)
        offs_k = tl.arange(0, BK)
        offs_kh = tl.arange(0, BK // 2)
        offs_ks = tl.arange(0, BK // 32)
        w_base = w_ptr + e64 * (2 * N * (K // 2))
        ws_base = ws_ptr + e64 * (2 * N * (K // 32))
        if USE_DS:
            if SWAP:
                # acc^T [BN, BM] = W[BN, BK] @ x^T[BK, BM]  (x bf16)
                xt_ptrs = x_ptr + tok[None, :] * K + offs_k[:, None]
                wu_ptrs = w_base + offs_n[:, None] * (K // 2) + offs_kh[None, :]
                su_ptrs = ws_base + offs_n[:, None] * (K // 32) + offs_ks[None, :]
                acct_u = tl.zeros([BN, BM], dtype=tl.float32)
                acct_g = tl.zeros([BN, BM], dtype=tl.float32)
                for kk in range(0, K // BK):
                    xt = tl.load(xt_ptrs)
                    acct_u = tl.dot_scaled(tl.load(wu_ptrs), tl.load(su_ptrs), "e2m1", xt, None, "bf16", acct_u)
                    acct_g = tl.dot_scaled(tl.load(wu_ptrs + N * (K // 2)), tl.load(su_ptrs + N * (K // 32)),
                                           "e2m1", xt, None, "bf16", acct_g)
                    xt_ptrs += BK
                    wu_ptrs += BK // 2
                    su_ptrs += BK // 32
                acc_u = tl.trans(acct_u)
                acc_g = tl.trans(acct_g)
            else:
                x_ptrs = x_ptr + tok[:, None] * K + offs_k[None, :]
                xs_ptrs = xs_ptr + tok[:, None] * (K // 32) + offs_ks[None, :]
                wu_ptrs = w_base + offs_n[None, :] * (K // 2) + offs_kh[:, None]
                su_ptrs = ws_base + offs_n[:, None] * (K // 32) + offs_ks[None, :]
                acc_u = tl.zeros([BM, BN], dtype=tl.float32)
                acc_g = tl.zeros([BM, BN], dtype=tl.float32)
                for kk in range(0, K // BK):
                    a = tl.load(x_ptrs)
                    bu = tl.load(wu_ptrs)
                    bg = tl.load(wu_ptrs + N * (K // 2))
                    su = tl.load(su_ptrs)
                    sg = tl.load(su_ptrs + N * (K // 32))
                    if X_BF16:
                        acc_u = tl.dot_scaled(a, None, "bf16", bu, su, "e2m1", acc_u)
                        acc_g = tl.dot_scaled(a, None, "bf16", bg, sg, "e2m1", acc_g)
                    else:
                        a_s = tl.load(xs_ptrs)
                        acc_u = tl.dot_scaled(a, a_s, "e4m3", bu, su, "e2m1", acc_u)
                        acc_g = tl.dot_scaled(a, a_s, "e4m3", bg, sg, "e2m1", acc_g)
                    x_ptrs += BK
                    xs_ptrs += BK // 32
                    wu_ptrs += BK // 2
                    su_ptrs += BK // 32
        else:
            # explicit dequantization (x e4m3): even / odd split along K (element 2j = low nibble)
            x_ptrs = x_ptr + tok[:, None] * K + 2 * offs_kh[None, :]
            xs_ptrs = xs_ptr + tok[:, None] * (K // 32) + (offs_kh // 16)[None, :]
            wu_ptrs = w_base + offs_n[None, :] * (K // 2) + offs_kh[:, None]
            su_ptrs = ws_base + offs_n[None, :] * (K // 32) + (offs_kh // 16)[:, None]
            acc_u = tl.zeros([BM, BN], dtype=tl.float32)
            acc_g = tl.zeros([BM, BN], dtype=tl.float32)
            for kk in range(0, K // BK):
                xsc = _pow2(tl.load(xs_ptrs))
                xe = (tl.load(x_ptrs).to(tl.float32) * xsc).to(tl.bfloat16)
                xo = (tl.load(x_ptrs + 1).to(tl.float32) * xsc).to(tl.bfloat16)
                bu = tl.load(wu_ptrs).to(tl.int32)
                bg = tl.load(wu_ptrs + N * (K // 2)).to(tl.int32)
                su = _pow2(tl.load(su_ptrs))
                sg = _pow2(tl.load(su_ptrs + N * (K // 32)))
                acc_u = tl.dot(xe, (_e2m1(bu & 15) * su).to(tl.bfloat16), acc_u)
                acc_u = tl.dot(xo, (_e2m1(bu >> 4) * su).to(tl.bfloat16), acc_u)
                acc_g = tl.dot(xe, (_e2m1(bg & 15) * sg).to(tl.bfloat16), acc_g)
                acc_g = tl.dot(xo, (_e2m1(bg >> 4) * sg).to(tl.bfloat16), acc_g)
                x_ptrs += BK
                xs_ptrs += BK // 32
                wu_ptrs += BK // 2
                su_ptrs += BK // 32
        # SiTU(4, 25); tanh(z) = 2 sigmoid(2z) - 1
        tg = 2.0 * tl.sigmoid(acc_g * 0.5) - 1.0
        tu = 2.0 * tl.sigmoid(acc_u * 0.08) - 1.0
        act = (4.0 * tg) * tl.sigmoid(acc_g) * (25.0 * tu)
        rows = offs_m.to(tl.int64)
        # MXFP8 floor recipe per 32 columns: byte = biased_exp(amax) - 8, clamp [0, 254]
        a3 = tl.reshape(act, [BM, BN // 32, 32])
        amax = tl.max(tl.abs(a3), axis=2)
        be = (amax.to(tl.int32, bitcast=True) >> 23) & 0xFF
        sb = tl.minimum(tl.maximum(be - 8, 0), 254)
        mult = ((254 - sb) << 23).to(tl.float32, bitcast=True)
        q3 = tl.minimum(tl.maximum(a3 * mult[:, :, None], -448.0), 448.0).to(tl.float8e4nv)
        if A_MODE == 0:
            tl.store(a_ptr + rows[:, None] * N + offs_n[None, :], tl.reshape(q3, [BM, BN]))
            offs_sn = pid_n * (BN // 32) + tl.arange(0, BN // 32)
            tl.store(as_ptr + rows[:, None] * (N // 32) + offs_sn[None, :], sb.to(tl.uint8))
        else:
            # the same MXFP8 values, dequantized (exact in bf16)
            dq = tl.reshape(q3.to(tl.float32) * _pow2(sb)[:, :, None], [BM, BN])
            tl.store(a_ptr + rows[:, None] * N + offs_n[None, :], dq.to(tl.bfloat16))

    @triton.jit(do_not_specialize=["num_pairs", "num_m_blocks"])
    def _fc2_kernel(a_ptr, as_ptr, w_ptr, ws_ptr, sid_ptr, eid_ptr, tw_ptr, y_ptr,
                    num_pairs, num_m_blocks,
                    N: tl.constexpr, K: tl.constexpr,
                    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GM: tl.constexpr,
                    USE_DS: tl.constexpr, A_FP8: tl.constexpr, SWAP: tl.constexpr):
        # y[pair, :] = tw[pair] * (a[row, :N] @ w2[e]^T), w2[e] is [K, N]
        pid_m, pid_n = _tile_ids(tl.program_id(0), num_m_blocks, K // BN, GM)
        e = tl.load(eid_ptr + pid_m)
        if e < 0:
            return
        e64 = e.to(tl.int64)
        offs_m = pid_m * BM + tl.arange(0, BM)
        rows = offs_m.to(tl.int64)
        pair = tl.load(sid_ptr + offs_m)
        valid = pair < num_pairs
        offs_n = pid_n * BN + tl.arange(0, BN)
        offs_k = tl.arange(0, BK)
        offs_kh = tl.arange(0, BK // 2)
        offs_ks = tl.arange(0, BK // 32)
        w_base = w_ptr + e64 * (K * (N // 2))
        ws_base = ws_ptr + e64 * (K * (N // 32))
        if USE_DS:
            if SWAP:
                at_ptrs = a_ptr + rows[None, :] * N + offs_k[:, None]
                w_ptrs = w_base + offs_n[:, None] * (N // 2) + offs_kh[None, :]
                s_ptrs = ws_base + offs_n[:, None] * (N // 32) + offs_ks[None, :]
                acct = tl.zeros([BN, BM], dtype=tl.float32)
                for kk in range(0, N // BK):
                    acct = tl.dot_scaled(tl.load(w_ptrs), tl.load(s_ptrs), "e2m1", tl.load(at_ptrs), None, "bf16",
                                         acct)
                    at_ptrs += BK
                    w_ptrs += BK // 2
                    s_ptrs += BK // 32
                acc = tl.trans(acct)
            else:
                a_ptrs = a_ptr + rows[:, None] * N + offs_k[None, :]
                as_ptrs = as_ptr + rows[:, None] * (N // 32) + offs_ks[None, :]
                w_ptrs = w_base + offs_n[None, :] * (N // 2) + offs_kh[:, None]
                s_ptrs = ws_base + offs_n[:, None] * (N // 32) + offs_ks[None, :]
                acc = tl.zeros([BM, BN], dtype=tl.float32)
                for kk in range(0, N // BK):
                    a = tl.load(a_ptrs)
                    b = tl.load(w_ptrs)
                    bs = tl.load(s_ptrs)
                    if A_FP8:
                        acc = tl.dot_scaled(a, tl.load(as_ptrs), "e4m3", b, bs, "e2m1", acc)
                    else:
                        acc = tl.dot_scaled(a, None, "bf16", b, bs, "e2m1", acc)
                    a_ptrs += BK
                    as_ptrs += BK // 32
                    w_ptrs += BK // 2
                    s_ptrs += BK // 32
        else:
            a_ptrs = a_ptr + rows[:, None] * N + 2 * offs_kh[None, :]
            as_ptrs = as_ptr + rows[:, None] * (N // 32) + (offs_kh // 16)[None, :]
            w_ptrs = w_base + offs_n[None, :] * (N // 2) + offs_kh[:, None]
            s_ptrs = ws_base + offs_n[None, :] * (N // 32) + (offs_kh // 16)[:, None]
            acc = tl.zeros([BM, BN], dtype=tl.float32)
            for kk in range(0, N // BK):
                if A_FP8:
                    sc = _pow2(tl.load(as_ptrs))
                    ae = (tl.load(a_ptrs).to(tl.float32) * sc).to(tl.bfloat16)
                    ao = (tl.load(a_ptrs + 1).to(tl.float32) * sc).to(tl.bfloat16)
                else:
                    ae = tl.load(a_ptrs)
                    ao = tl.load(a_ptrs + 1)
                b = tl.load(w_ptrs).to(tl.int32)
                bs = _pow2(tl.load(s_ptrs))
                acc = tl.dot(ae, (_e2m1(b & 15) * bs).to(tl.bfloat16), acc)
                acc = tl.dot(ao, (_e2m1(b >> 4) * bs).to(tl.bfloat16), acc)
                a_ptrs += BK
                as_ptrs += BK // 32
                w_ptrs += BK // 2
                s_ptrs += BK // 32
        wgt = tl.load(tw_ptr + pair, mask=valid, other=0.0)
        y = acc * wgt[:, None]
        tl.store(y_ptr + pair.to(tl.int64)[:, None] * K + offs_n[None, :], y.to(tl.bfloat16),
                 mask=valid[:, None])


KIND_SPECS = {
    "dot_scaled_e4m3": dict(USE_DS=True, X_BF16=False, SWAP=False, A_MODE=0),
    "dequant_e4m3": dict(USE_DS=False, X_BF16=False, SWAP=False, A_MODE=0),
    "dot_scaled_bf16act": dict(USE_DS=True, X_BF16=True, SWAP=False, A_MODE=1),
    "dot_scaled_bf16act_swapab": dict(USE_DS=True, X_BF16=True, SWAP=True, A_MODE=1),
}


def x_to_bf16(d):
    M = d["M"]
    return (d["xq"].view(M, K // 32, 32).float() * torch.exp2(d["xs"].float() - 127.0)[..., None]) \
        .view(M, K).to(torch.bfloat16)


class TritonMoE:
    """One routing layout (for one BM) and the buffers both kernels use."""

    def __init__(self, W, d, BM, kind):
        self.W, self.d, self.BM, self.kind = W, d, BM, kind
        self.spec = KIND_SPECS[kind]
        self.M = d["M"]
        self.P = self.M * TOPK
        self.tw = d["tw"].reshape(-1)
        self.sid, self.eid, self.nblk, self.max_pad = prep(d["topk_ids"], BM)
        self.x = x_to_bf16(d) if self.spec["X_BF16"] else d["xq"]
        self.a, self.as_ = self._alloc_a(self.max_pad)
        self.y = torch.empty(self.P, K, dtype=torch.bfloat16, device=DEV)

    def _alloc_a(self, rows):
        if self.spec["A_MODE"] == 0:
            return (torch.empty(rows, N, dtype=F8, device=DEV),
                    torch.empty(rows, N // 32, dtype=torch.uint8, device=DEV))
        return torch.empty(rows, N, dtype=torch.bfloat16, device=DEV), torch.empty(1, 1, dtype=torch.uint8, device=DEV)

    def fc1(self, cfg, sid=None, eid=None, a=None, as_=None, x=None):
        BN, nw, ns = cfg
        W, d, sp = self.W, self.d, self.spec
        return _fc1_kernel[(self.nblk * (N // BN),)](
            self.x if x is None else x, d["xs"], W["w31p"], W["w31s"],
            self.sid if sid is None else sid, self.eid if eid is None else eid,
            self.a if a is None else a, self.as_ if as_ is None else as_,
            self.P, self.nblk, N=N, K=K, TOPK=TOPK, BM=self.BM, BN=BN, BK=BK, GM=GROUP_M,
            USE_DS=sp["USE_DS"], X_BF16=sp["X_BF16"], SWAP=sp["SWAP"], A_MODE=sp["A_MODE"],
            num_warps=nw, num_stages=ns)

    def fc2(self, cfg, sid=None, eid=None, a=None, as_=None, y=None):
        BN, nw, ns = cfg
        W, sp = self.W, self.spec
        return _fc2_kernel[(self.nblk * (K // BN),)](
            self.a if a is None else a, self.as_ if as_ is None else as_, W["w2p"], W["w2s"],
            self.sid if sid is None else sid, self.eid if eid is None else eid, self.tw,
            self.y if y is None else y,
            self.P, self.nblk, N=N, K=K, BM=self.BM, BN=BN, BK=BK, GM=GROUP_M,
            USE_DS=sp["USE_DS"], A_FP8=sp["A_MODE"] == 0, SWAP=sp["SWAP"], num_warps=nw, num_stages=ns)

    def gemms(self, cfg1, cfg2):
        self.fc1(cfg1)
        self.fc2(cfg2)

    def forward(self, cfg1, cfg2):
        """Whole forward from (x MXFP8, topk_ids, topk_weights): layout, FC1, FC2, per-token sum."""
        sid, eid, nblk, max_pad = prep(self.d["topk_ids"], self.BM)
        x = x_to_bf16(self.d) if self.spec["X_BF16"] else self.d["xq"]
        a, as_ = self._alloc_a(max_pad)
        y = torch.empty(self.P, K, dtype=torch.bfloat16, device=DEV)
        self.fc1(cfg1, sid, eid, a, as_, x)
        self.fc2(cfg2, sid, eid, a, as_, y)
        return y.view(self.M, TOPK, K).sum(dim=1, dtype=torch.float32)


# ----------------------------------------------------------------------------------------------
# torch._scaled_grouped_mm FP8 rowwise peer
# ----------------------------------------------------------------------------------------------
def rowwise_pow2_fp8(wd):
    """[R, C] fp32 -> fp8 rows with power-of-two row scales (exact for MXFP4-derived rows)."""
    amax = wd.abs().amax(dim=1)
    _, ex = torch.frexp(amax)
    sc = torch.exp2((ex.to(torch.int32) - 9).to(torch.float32))
    return (wd / sc[:, None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn), sc


def rowwise_fp8(a):
    sc = (a.abs().amax(dim=1).float() / 448.0).clamp(min=1e-12)
    return (a.float() / sc[:, None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn), sc


class SgmmMoE:
    def __init__(self, W):
        self.w31 = torch.empty(E, 2 * N, K, dtype=torch.float8_e4m3fn, device=DEV)
        self.s31 = torch.empty(E, 2 * N, dtype=torch.float32, device=DEV)
        self.w2 = torch.empty(E, K, N, dtype=torch.float8_e4m3fn, device=DEV)
        self.s2 = torch.empty(E, K, dtype=torch.float32, device=DEV)
        for e in range(E):
            self.w31[e], self.s31[e] = rowwise_pow2_fp8(W["w31d"][e])
            self.w2[e], self.s2[e] = rowwise_pow2_fp8(W["w2d"][e])
        self.w31t = self.w31.transpose(-2, -1)  # [E, K, 2N], column-major per expert
        self.w2t = self.w2.transpose(-2, -1)    # [E, N, K]

    def forward(self, d, fast_accum=False, keep=None):
        M = d["M"]
        flat = d["topk_ids"].reshape(-1).long()
        order = torch.sort(flat, stable=True)[1]
        counts = torch.zeros(E, dtype=torch.long, device=DEV).scatter_add_(0, flat, torch.ones_like(flat))
        offs = torch.cumsum(counts, 0).to(torch.int32)
        a1, sa1 = rowwise_fp8(d["x_bf16"][order // TOPK])
        h = torch._scaled_grouped_mm(a1, self.w31t, sa1, self.s31, offs=offs, out_dtype=torch.bfloat16,
                                     use_fast_accum=fast_accum)
        act = situ(h[:, N:].float(), h[:, :N].float())
        a2, sa2 = rowwise_fp8(act)
        y = torch._scaled_grouped_mm(a2, self.w2t, sa2, self.s2, offs=offs, out_dtype=torch.bfloat16,
                                     use_fast_accum=fast_accum)
        if keep is not None:
            keep.update(a1=a1, sa1=sa1, a2=a2, sa2=sa2, offs=offs)
        ypair = torch.empty(M * TOPK, K, dtype=torch.bfloat16, device=DEV)
        ypair[order] = (y.float() * d["tw"].reshape(-1)[order][:, None]).to(torch.bfloat16)
        return ypair.view(M, TOPK, K).sum(dim=1, dtype=torch.float32)

    def gemms(self, k, fast_accum=False):
        torch._scaled_grouped_mm(k["a1"], self.w31t, k["sa1"], self.s31, offs=k["offs"],
                                 out_dtype=torch.bfloat16, use_fast_accum=fast_accum)
        torch._scaled_grouped_mm(k["a2"], self.w2t, k["sa2"], self.s2, offs=k["offs"],
                                 out_dtype=torch.bfloat16, use_fast_accum=fast_accum)


# ----------------------------------------------------------------------------------------------
# device run
# ----------------------------------------------------------------------------------------------
def bench(fn):
    return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))


def graph_bench(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    torch.cuda.synchronize()
    return bench(lambda: g.replay())


def short_err(ex):
    s = "%s: %s" % (type(ex).__name__, str(ex))
    return s[-600:] if len(s) > 600 else s


# per kind: BM -> FC1 / FC2 configs (BN, num_warps, num_stages), BM candidates per M. In the swapab kind BM
# is the token tile (wgmma N) and BN the weight-row tile (wgmma M).
CFGS = {
    "dot_scaled_e4m3": {  # the best shapes of the first sweep (run 1)
        "fc1": {16: [(64, 4, 4), (128, 4, 3)], 128: [(128, 8, 3)]},
        "fc2": {16: [(64, 4, 4), (128, 4, 3)], 128: [(256, 8, 3)]},
        "bm": {1: [16], 128: [16], 512: [128], 2048: [128], 8192: [128]}},
    "dot_scaled_bf16act": {
        "fc1": {16: [(64, 4, 4), (128, 4, 3), (64, 4, 6)], 64: [(64, 4, 3), (64, 4, 4), (128, 8, 3)],
                128: [(128, 8, 3), (128, 8, 4), (64, 8, 3)]},
        "fc2": {16: [(64, 4, 4), (128, 4, 3), (128, 4, 5)], 64: [(128, 4, 3), (128, 4, 4), (256, 8, 3)],
                128: [(128, 8, 3), (128, 8, 4), (256, 8, 3)]},
        "bm": {1: [16], 128: [16, 64], 512: [64, 128], 2048: [64, 128], 8192: [64, 128]}},
    "dot_scaled_bf16act_swapab": {  # the best shapes of the second sweep (run 2)
        "fc1": {16: [(64, 4, 4)], 64: [(128, 8, 3)], 128: [(128, 8, 3)]},
        "fc2": {16: [(128, 4, 4)], 64: [(128, 4, 3)], 128: [(256, 8, 3)]},
        "bm": {1: [16], 128: [64], 512: [128], 2048: [128], 8192: [128]}},
}
SELECT = {  # kind -> (BM, fc1 cfg, fc2 cfg) for the M=128 correctness check
    "dot_scaled_e4m3": (64, (64, 4, 3), (128, 4, 3)),
    "dequant_e4m3": (64, (64, 4, 3), (128, 4, 3)),
    "dot_scaled_bf16act": (64, (64, 4, 3), (128, 4, 3)),
    "dot_scaled_bf16act_swapab": (64, (64, 4, 3), (64, 4, 3)),
}


def ir_summary(kobj):
    ttg = kobj.asm.get("ttgir", "")
    ptx = kobj.asm.get("ptx", "")
    return {"ttgir_dot_scaled": "dot_scaled" in ttg, "ttgir_fp4_to_fp": "fp4_to_fp" in ttg,
            "ttgir_warp_group_dot": "warp_group_dot" in ttg, "ptx_wgmma": "wgmma" in ptx,
            "ptx_mma_sync": "mma.sync" in ptx, "regs": getattr(kobj, "n_regs", None),
            "spills": getattr(kobj, "n_spills", None)}


def tune_kind(W, d, kind, M, ref, nref, tuning):
    """Sweep BM and both kernels' tiles for one kind; return the best correct forward or None."""
    spec = CFGS[kind]
    bms = spec["bm"].get(M) or spec["bm"][max(k for k in spec["bm"] if k <= M)]  # the nearest smaller M's tiles
    if time_left() < 110:
        bms = bms[-1:]
    best = None
    for BM in bms:
        try:
            r = TritonMoE(W, d, BM, kind)
        except Exception as ex:
            tuning.append({"kind": kind, "BM": BM, "error": short_err(ex)})
            continue
        picked = []
        for which, cfgs in (("fc1", spec["fc1"][BM]), ("fc2", spec["fc2"][BM])):
            if time_left() < 70:
                cfgs = cfgs[:1]
            fn = r.fc1 if which == "fc1" else r.fc2
            b = None
            for c in cfgs:
                try:
                    kobj = fn(c)
                    torch.cuda.synchronize()
                    t = bench(lambda: fn(c))
                    ent = {"kind": kind, "BM": BM, which: c, "ms": t}
                    try:
                        ent["regs"], ent["spills"] = kobj.n_regs, kobj.n_spills
                    except Exception:
                        pass
                    tuning.append(ent)
                    if b is None or t < b[1]:
                        b = (c, t)
                except Exception as ex:
                    tuning.append({"kind": kind, "BM": BM, which: c, "error": short_err(ex)})
            if b is None:
                break
            picked.append(b)
            if which == "fc1":
                fn(b[0])  # leave FC1's output of the best tile for the FC2 runs
        if len(picked) < 2:
            continue
        (c1, t1), (c2, t2) = picked
        try:
            out = r.forward(c1, c2)
            err = rel_err(out[:nref], ref)
            tf = bench(lambda: r.forward(c1, c2))
            ent = {"kind": kind, "BM": BM, "fc1": c1, "fc2": c2, "forward_ms": tf, "gemms_ms": t1 + t2,
                   "rel_err": err}
            tuning.append(ent)
            log("M=%d %s BM=%d fc1=%s %.3f ms fc2=%s %.3f ms forward %.3f ms rel_err %.2e" %
                (M, kind, BM, c1, t1, c2, t2, tf, err))
            if err < 1e-2 and (best is None or tf < best["forward_ms"]):
                best = dict(ent, runner=r)
        except Exception as ex:
            tuning.append({"kind": kind, "BM": BM, "forward_error": short_err(ex)})
    return best


def device_main():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    res = {"script": "bench/peer_moe.py", "peer": "Triton MX MoE",
           "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "triton": triton.__version__, "cuda": torch.version.cuda,
           "workload": {"E": E, "K": K, "N": N, "topk_local": TOPK, "x": "MXFP8 floor", "w": "MXFP4",
                        "activation": "SiTU(4,25)", "intermediate": "MXFP8 floor (all kinds)"},
           "timing": "triton.testing.do_bench median, warmup 25 ms, rep 100 ms, L2 flushed; triton_ms is the "
                     "whole forward from MXFP8 x + routing (layout, FC1, FC2, per-token sum), eager",
           "variants": [], "rows": [], "notes": []}
    out_json = os.path.join(OUT, "peer_triton.json")

    def save():
        with open(out_json, "w") as f:
            json.dump(res, f, indent=1)

    log("device", res["device"], "torch", res["torch"], "triton", res["triton"])
    W = make_weights()
    torch.cuda.synchronize()
    log("weights ready")

    # ---- which kinds compile and are correct, at M=128 ------------------------------------------
    d128 = make_inputs(128, seed=128)
    ref128 = reference(W, d128, 128, True)
    ref128_noq = reference(W, d128, 128, False)
    passing = []
    for kind in ["dot_scaled_e4m3", "dequant_e4m3", "dot_scaled_bf16act", "dot_scaled_bf16act_swapab"]:
        BM, c1, c2 = SELECT[kind]
        v = {"kind": kind, "BM": BM, "fc1": c1, "fc2": c2}
        try:
            t0 = time.time()
            r = TritonMoE(W, d128, BM, kind)
            out = r.forward(c1, c2)
            torch.cuda.synchronize()
            v["compile_and_run_s"] = round(time.time() - t0, 1)
            v["rel_err_m128"] = rel_err(out, ref128)
            v["rel_err_vs_unquantized_intermediate"] = rel_err(out, ref128_noq)
            v["finite"] = bool(torch.isfinite(out).all())
            v["ok"] = v["finite"] and v["rel_err_m128"] < 1e-2
            try:
                v["fc1_ir"] = ir_summary(r.fc1(c1))
                v["fc2_ir"] = ir_summary(r.fc2(c2))
            except Exception as ex:
                v["ir_error"] = short_err(ex)
            del r
        except Exception as ex:
            v["ok"] = False
            v["error"] = short_err(ex)
            traceback.print_exc()
        if v["ok"]:
            passing.append(kind)
        res["variants"].append(v)
        log("variant", json.dumps(v))
        save()
    tune_kinds = [k for k in ["dot_scaled_bf16act_swapab", "dot_scaled_bf16act", "dot_scaled_e4m3"] if k in passing]
    if not tune_kinds and "dequant_e4m3" in passing:
        CFGS["dequant_e4m3"] = CFGS["dot_scaled_e4m3"]
        tune_kinds = ["dequant_e4m3"]
    if not tune_kinds:
        res["notes"].append("no Triton kind compiled and passed at M=128")

    sg = None
    try:
        sg = SgmmMoE(W)
    except Exception as ex:
        res["notes"].append("scaled_grouped_mm setup failed: " + short_err(ex))
    torch.cuda.synchronize()

    for M in MS:
        row = {"M": M, "flop": M * TOPK * 2 * 3 * N * K}
        d = make_inputs(M, seed=M)
        d["x_bf16"] = d["x_deq"].to(torch.bfloat16)
        nref = min(M, 128)
        ref = reference(W, d, nref, True)
        row["rel_err_tokens"] = nref
        row["experts_touched"] = int(torch.unique(d["topk_ids"]).numel())
        tuning = []
        best = None
        per_kind = {}
        for kind in tune_kinds:
            if time_left() < 25 and best is not None:
                per_kind[kind] = "skipped (time budget)"
                continue
            b = tune_kind(W, d, kind, M, ref, nref, tuning)
            if b is None:
                per_kind[kind] = "no correct config"
                continue
            per_kind[kind] = {k: v for k, v in b.items() if k != "runner"}
            if time_left() > 20:
                try:
                    rr, c1, c2 = b["runner"], b["fc1"], b["fc2"]
                    per_kind[kind]["graph_ms"] = graph_bench(lambda: rr.forward(c1, c2))
                    log("M=%d %s CUDA graph forward %.3f ms" % (M, kind, per_kind[kind]["graph_ms"]))
                    del rr
                except Exception as ex:
                    per_kind[kind]["graph_error"] = short_err(ex)
            if best is None or b["forward_ms"] < best["forward_ms"]:
                if best is not None:
                    del best["runner"]
                best = b
            else:
                del b["runner"]
        row["per_kind"] = per_kind
        if best is not None:
            r = best.pop("runner")
            row.update({"triton_ms": best["forward_ms"], "triton_kind": best["kind"],
                        "triton_gemms_ms": best["gemms_ms"], "rel_err": best["rel_err"], "BM": best["BM"],
                        "fc1_cfg": best["fc1"], "fc2_cfg": best["fc2"],
                        "triton_tflops": row["flop"] / best["forward_ms"] / 1e9})
            try:
                row["triton_gemms_ms_together"] = bench(lambda: r.gemms(best["fc1"], best["fc2"]))
            except Exception as ex:
                row["gemms_error"] = short_err(ex)
            gk = [(v["graph_ms"], k) for k, v in per_kind.items() if isinstance(v, dict) and "graph_ms" in v]
            if gk:
                row["triton_graph_ms"], row["triton_graph_kind"] = min(gk)
            del r
        row["tuning"] = tuning
        # ---- torch._scaled_grouped_mm FP8 rowwise ---------------------------------------------
        if sg is not None:
            try:
                keep = {}
                out = sg.forward(d, False, keep)
                row["sgmm_rel_err"] = rel_err(out[:nref], ref)
                for fa in (False, True):
                    tg = bench(lambda: sg.gemms(keep, fa))
                    tfull = bench(lambda: sg.forward(d, fa))
                    row["sgmm_gemms_ms_fast_accum" if fa else "sgmm_gemms_ms"] = tg
                    row["sgmm_full_ms_fast_accum" if fa else "sgmm_full_ms"] = tfull
                row["scaled_grouped_mm_ms"] = min(row["sgmm_gemms_ms"], row["sgmm_gemms_ms_fast_accum"])
                log("M=%d sgmm gemms %.3f / %.3f (fast) ms, full %.3f ms, rel_err %.2e" %
                    (M, row["sgmm_gemms_ms"], row["sgmm_gemms_ms_fast_accum"], row["sgmm_full_ms"],
                     row["sgmm_rel_err"]))
                del keep
            except Exception as ex:
                row["sgmm_error"] = short_err(ex)
                log("M=%d sgmm error %s" % (M, row["sgmm_error"]))
        res["rows"].append(row)
        save()
        del d
        torch.cuda.empty_cache()

    # ---- table -----------------------------------------------------------------------------------
    hdr = "%6s %10s %27s %9s %9s %27s %9s %8s %10s %10s" % (
        "M", "triton_ms", "triton_kind", "rel_err", "graph_ms", "graph_kind", "gemms_ms", "sgmm_ms", "sgmm_full",
        "sgmm_err")
    lines = [hdr]
    for row in res["rows"]:
        def f(key, fmt="%.3f"):
            v = row.get(key)
            return fmt % v if isinstance(v, (int, float)) else "-"
        lines.append("%6d %10s %27s %9s %9s %27s %9s %8s %10s %10s" % (
            row["M"], f("triton_ms"), row.get("triton_kind", "-"), f("rel_err", "%.2e"),
            f("triton_graph_ms"), row.get("triton_graph_kind", "-"), f("triton_gemms_ms_together"),
            f("scaled_grouped_mm_ms"),
            f("sgmm_full_ms"), f("sgmm_rel_err", "%.2e")))
    res["table"] = lines
    res["elapsed_s"] = round(time.time() - T_START, 1)
    save()
    log("\n" + "\n".join(lines))
    log("wrote", out_json)


if __name__ == "__main__":
    if LOCAL:
        import peer_moe_local
        peer_moe_local.local_main()
    else:
        if not HAVE_TRITON or not torch.cuda.is_available():
            print("needs CUDA and Triton", file=sys.stderr)
            sys.exit(2)
        device_main()
