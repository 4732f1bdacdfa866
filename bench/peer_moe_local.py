#!/usr/bin/env python3
"""CPU checks of bench/peer_moe.py without a GPU or Triton, at tiny shapes: the
routing layout, the epilogue's MXFP8 quantizer and a pointer-level
emulation of both Triton kernels against the float32 reference.

    python3 bench/peer_moe_local.py     (or PEER_LOCAL_TEST=1 python3 bench/peer_moe.py)
"""
import os
import sys

os.environ["PEER_LOCAL_TEST"] = "1"  # peer_moe's tiny CPU shapes, read at its import
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from peer_moe import *  # noqa: E402,F401,F403  (the shapes, the quantizers, the reference)

# ----------------------------------------------------------------------------------------------
# local (CPU) checks of the layout, the quantizer and the kernels' pointer arithmetic
# ----------------------------------------------------------------------------------------------
def _emu_deq_packed_k(p, sc, axis):
    """e2m1 packed along K; axis 0: p [BK/2, BN] -> [BK, BN]; axis 1: p [BN, BK/2] -> [BN, BK].
    sc is [BN, BK/32] in both cases (dot_scaled's scale layout)."""
    lut = torch.tensor(E2M1_VALUES)
    lo = lut[(p & 15).long()]
    hi = lut[(p >> 4).long()]
    if axis == 0:
        v = torch.stack([lo, hi], dim=1).reshape(p.shape[0] * 2, p.shape[1])
        return v * pow2_from_byte(sc).t().repeat_interleave(32, dim=0)
    v = torch.stack([lo, hi], dim=2).reshape(p.shape[0], p.shape[1] * 2)
    return v * pow2_from_byte(sc).repeat_interleave(32, dim=1)


def _emu_dot_scaled(a, a_s, b_packed, b_s):
    """lhs e4m3 (+ scale [BM, BK/32]) or bf16 (a_s None) [BM, BK]; rhs e2m1 [BK/2, BN] + scale [BN, BK/32]."""
    ad = a.float() if a_s is None else a.float() * pow2_from_byte(a_s).repeat_interleave(32, dim=1)
    return ad @ _emu_deq_packed_k(b_packed, b_s, 0)


def _emu_dot_scaled_swap(w_packed, w_s, bt):
    """lhs e2m1 [BN, BK/2] + scale [BN, BK/32]; rhs bf16 [BK, BM]."""
    return _emu_deq_packed_k(w_packed, w_s, 1) @ bt.float()


def _emu_e2m1_formula(c):
    mag = (c & 7).float()
    v = torch.where(mag < 4.0, mag * 0.5, torch.where(mag < 6.0, mag - 2.0, mag * 2.0 - 8.0))
    return torch.where((c & 8) != 0, -v, v)


def _emu_pow2(s):
    return (s.to(torch.int32) << 23).view(torch.float32)


def _bf16(t):
    return t.to(torch.bfloat16).float()


def _emu_kernels(W, d, BM, BN1, BN2, kind):
    """Port of _fc1_kernel / _fc2_kernel: same offsets on flat memory, one program at a time."""
    sp = KIND_SPECS_LOCAL[kind]
    M = d["M"]
    P = M * TOPK
    sid, eid, nblk, max_pad = prep(d["topk_ids"], BM)
    if sp["X_BF16"]:
        x_mem = _bf16(mx8_dequant(d["xq"], d["xs"])).reshape(-1)
    else:
        x_mem = d["xq"].reshape(-1).float()
    xs = d["xs"].reshape(-1)
    w31p, w31s = W["w31p"].reshape(-1), W["w31s"].reshape(-1)
    w2p, w2s = W["w2p"].reshape(-1), W["w2s"].reshape(-1)
    a_mem = torch.full((max_pad * N,), float("nan"))
    as_mem = torch.zeros(max_pad * (N // 32), dtype=torch.uint8)
    y_mem = torch.full((P * K,), float("nan"))
    tw = d["tw"].reshape(-1)
    seen = set()
    for pid in range(nblk * (N // BN1)):
        pid_m, pid_n = tile_ids(pid, nblk, N // BN1, GROUP_M)
        seen.add((pid_m, pid_n))
        e = int(eid[pid_m])
        if e < 0:
            continue
        offs_m = pid_m * BM + torch.arange(BM)
        pair = sid[offs_m].long()
        tok = torch.where(pair < P, pair // TOPK, torch.zeros_like(pair))
        offs_n = pid_n * BN1 + torch.arange(BN1)
        offs_k = torch.arange(BK)
        offs_kh = torch.arange(BK // 2)
        offs_ks = torch.arange(BK // 32)
        w_base = e * (2 * N * (K // 2))
        ws_base = e * (2 * N * (K // 32))
        if sp["USE_DS"] and sp["SWAP"]:
            xt_off = tok[None, :] * K + offs_k[:, None]
            wu_off = w_base + offs_n[:, None] * (K // 2) + offs_kh[None, :]
            su_off = ws_base + offs_n[:, None] * (K // 32) + offs_ks[None, :]
            acct_u = torch.zeros(BN1, BM)
            acct_g = torch.zeros(BN1, BM)
            for kk in range(K // BK):
                xt = x_mem[xt_off]
                acct_u += _emu_dot_scaled_swap(w31p[wu_off], w31s[su_off], xt)
                acct_g += _emu_dot_scaled_swap(w31p[wu_off + N * (K // 2)], w31s[su_off + N * (K // 32)], xt)
                xt_off = xt_off + BK
                wu_off = wu_off + BK // 2
                su_off = su_off + BK // 32
            acc_u, acc_g = acct_u.t(), acct_g.t()
        elif sp["USE_DS"]:
            x_off = tok[:, None] * K + offs_k[None, :]
            xs_off = tok[:, None] * (K // 32) + offs_ks[None, :]
            wu_off = w_base + offs_n[None, :] * (K // 2) + offs_kh[:, None]
            su_off = ws_base + offs_n[:, None] * (K // 32) + offs_ks[None, :]
            acc_u = torch.zeros(BM, BN1)
            acc_g = torch.zeros(BM, BN1)
            for kk in range(K // BK):
                a = x_mem[x_off]
                a_s = None if sp["X_BF16"] else xs[xs_off]
                acc_u += _emu_dot_scaled(a, a_s, w31p[wu_off], w31s[su_off])
                acc_g += _emu_dot_scaled(a, a_s, w31p[wu_off + N * (K // 2)], w31s[su_off + N * (K // 32)])
                x_off = x_off + BK
                xs_off = xs_off + BK // 32
                wu_off = wu_off + BK // 2
                su_off = su_off + BK // 32
        else:
            x_off = tok[:, None] * K + 2 * offs_kh[None, :]
            xs_off = tok[:, None] * (K // 32) + (offs_kh // 16)[None, :]
            wu_off = w_base + offs_n[None, :] * (K // 2) + offs_kh[:, None]
            su_off = ws_base + offs_n[None, :] * (K // 32) + (offs_kh // 16)[:, None]
            acc_u = torch.zeros(BM, BN1)
            acc_g = torch.zeros(BM, BN1)
            for kk in range(K // BK):
                xsc = _emu_pow2(xs[xs_off])
                xe = _bf16(x_mem[x_off] * xsc)
                xo = _bf16(x_mem[x_off + 1] * xsc)
                bu = w31p[wu_off].to(torch.int32)
                bg = w31p[wu_off + N * (K // 2)].to(torch.int32)
                su = _emu_pow2(w31s[su_off])
                sg = _emu_pow2(w31s[su_off + N * (K // 32)])
                acc_u += xe @ (_emu_e2m1_formula(bu & 15) * su) + xo @ (_emu_e2m1_formula(bu >> 4) * su)
                acc_g += xe @ (_emu_e2m1_formula(bg & 15) * sg) + xo @ (_emu_e2m1_formula(bg >> 4) * sg)
                x_off = x_off + BK
                xs_off = xs_off + BK // 32
                wu_off = wu_off + BK // 2
                su_off = su_off + BK // 32
        tg = 2.0 * torch.sigmoid(acc_g * 0.5) - 1.0
        tu = 2.0 * torch.sigmoid(acc_u * 0.08) - 1.0
        act = (4.0 * tg) * torch.sigmoid(acc_g) * (25.0 * tu)
        a3 = act.reshape(BM, BN1 // 32, 32)
        amax = a3.abs().amax(dim=2).contiguous()
        be = (amax.view(torch.int32) >> 23) & 0xFF
        sb = torch.clamp(be - 8, 0, 254)
        mult = ((254 - sb) << 23).contiguous().view(torch.float32)
        q3 = round_e4m3_emul((a3 * mult[:, :, None]).clamp(-448.0, 448.0))
        rows = offs_m
        dst = (rows[:, None] * N + offs_n[None, :]).reshape(-1)
        if sp["A_MODE"] == 0:
            a_mem[dst] = q3.reshape(-1)
            offs_sn = pid_n * (BN1 // 32) + torch.arange(BN1 // 32)
            as_mem[(rows[:, None] * (N // 32) + offs_sn[None, :]).reshape(-1)] = sb.to(torch.uint8).reshape(-1)
        else:
            a_mem[dst] = _bf16(q3 * _emu_pow2(sb)[:, :, None]).reshape(-1)
    assert len(seen) == nblk * (N // BN1), "fc1 tile mapping is not a bijection"
    seen = set()
    a_fp8 = sp["A_MODE"] == 0
    for pid in range(nblk * (K // BN2)):
        pid_m, pid_n = tile_ids(pid, nblk, K // BN2, GROUP_M)
        seen.add((pid_m, pid_n))
        e = int(eid[pid_m])
        if e < 0:
            continue
        offs_m = pid_m * BM + torch.arange(BM)
        rows = offs_m
        pair = sid[offs_m].long()
        valid = pair < P
        offs_n = pid_n * BN2 + torch.arange(BN2)
        offs_k = torch.arange(BK)
        offs_kh = torch.arange(BK // 2)
        offs_ks = torch.arange(BK // 32)
        w_base = e * (K * (N // 2))
        ws_base = e * (K * (N // 32))
        if sp["USE_DS"] and sp["SWAP"]:
            at_off = rows[None, :] * N + offs_k[:, None]
            w_off = w_base + offs_n[:, None] * (N // 2) + offs_kh[None, :]
            s_off = ws_base + offs_n[:, None] * (N // 32) + offs_ks[None, :]
            acct = torch.zeros(BN2, BM)
            for kk in range(N // BK):
                acct += _emu_dot_scaled_swap(w2p[w_off], w2s[s_off], a_mem[at_off])
                at_off = at_off + BK
                w_off = w_off + BK // 2
                s_off = s_off + BK // 32
            acc = acct.t()
        elif sp["USE_DS"]:
            a_off = rows[:, None] * N + offs_k[None, :]
            as_off = rows[:, None] * (N // 32) + offs_ks[None, :]
            w_off = w_base + offs_n[None, :] * (N // 2) + offs_kh[:, None]
            s_off = ws_base + offs_n[:, None] * (N // 32) + offs_ks[None, :]
            acc = torch.zeros(BM, BN2)
            for kk in range(N // BK):
                acc += _emu_dot_scaled(a_mem[a_off], as_mem[as_off] if a_fp8 else None, w2p[w_off], w2s[s_off])
                a_off = a_off + BK
                as_off = as_off + BK // 32
                w_off = w_off + BK // 2
                s_off = s_off + BK // 32
        else:
            a_off = rows[:, None] * N + 2 * offs_kh[None, :]
            as_off = rows[:, None] * (N // 32) + (offs_kh // 16)[None, :]
            w_off = w_base + offs_n[None, :] * (N // 2) + offs_kh[:, None]
            s_off = ws_base + offs_n[None, :] * (N // 32) + (offs_kh // 16)[:, None]
            acc = torch.zeros(BM, BN2)
            for kk in range(N // BK):
                sc = _emu_pow2(as_mem[as_off]) if a_fp8 else torch.ones(1)
                ae = _bf16(a_mem[a_off] * sc)
                ao = _bf16(a_mem[a_off + 1] * sc)
                b = w2p[w_off].to(torch.int32)
                bs = _emu_pow2(w2s[s_off])
                acc += ae @ (_emu_e2m1_formula(b & 15) * bs) + ao @ (_emu_e2m1_formula(b >> 4) * bs)
                a_off = a_off + BK
                as_off = as_off + BK // 32
                w_off = w_off + BK // 2
                s_off = s_off + BK // 32
        wgt = torch.where(valid, tw[torch.where(valid, pair, torch.zeros_like(pair))], torch.zeros(BM))
        yv = _bf16(acc * wgt[:, None])
        dst = (pair[:, None] * K + offs_n[None, :])[valid]
        y_mem[dst.reshape(-1)] = yv[valid].reshape(-1)
    assert len(seen) == nblk * (K // BN2), "fc2 tile mapping is not a bijection"
    assert not torch.isnan(y_mem).any(), "some pair rows were not written"
    return y_mem.view(M, TOPK, K).sum(dim=1)


KIND_SPECS_LOCAL = KIND_SPECS


def local_main():
    torch.manual_seed(0)
    # E2M1 formula vs table, bit-quantizer vs frexp quantizer
    c = torch.arange(16, dtype=torch.int32)
    assert torch.equal(_emu_e2m1_formula(c), torch.tensor(E2M1_VALUES)), "e2m1 formula"
    a = torch.randn(64, 256) * torch.exp2(torch.randint(-6, 6, (64, 1)).float())
    a[3, 32:64] = 0.0
    a[5, :32] = 448.0 * 4
    q1, s1 = mx8_quant_ref(a)
    q2, s2 = mx8_quant_bits(a)
    assert torch.equal(s1, s2) and torch.equal(q1, q2), "quantizers differ"
    assert int(s1[3, 1]) == 0 and bool((q1[3, 32:64] == 0).all()), "zero block"
    r = rel_err(mx8_dequant(q1, s1), a)
    assert r < 0.05, r
    print("quantizers agree; MXFP8 rel err %.3e" % r)
    # round_e4m3_emul against the E4M3 grid
    grid = sorted(set([m * 2.0 ** e for e in range(-6, 9) for m in [1 + i / 8 for i in range(8)]] +
                      [i / 8 * 2.0 ** -6 for i in range(8)]))
    grid = [g for g in grid if g <= 448]
    xs = torch.rand(20000) * 460
    rq = round_e4m3_emul(xs.clamp(max=448))
    gt = torch.tensor(grid)
    nearest = gt[(xs.clamp(max=448)[:, None] - gt[None, :]).abs().argmin(dim=1)]
    assert bool(((rq - nearest).abs() <= 1e-6 * nearest.abs() + 1e-12).float().mean() > 0.999), "e4m3 rounding"
    W = make_weights(7)
    for M, BM in [(1, 4), (7, 4), (7, 8), (33, 16), (2, 16)]:
        d = make_inputs(M, seed=M)
        sid, eid, nblk, max_pad = prep(d["topk_ids"], BM)
        P = M * TOPK
        flat = d["topk_ids"].reshape(-1).long()
        real = sid[sid < P].long()
        assert torch.equal(real.sort()[0], torch.arange(P)), "each pair once"
        blk = torch.arange(max_pad) // BM
        e_row = eid.long()[blk]
        m = sid < P
        assert bool((e_row[m] == flat[sid[m].long()]).all()), "pair in its expert's block"
        assert bool((sid[e_row < 0] == P).all()), "blocks past the end hold only padding"
        for e in range(E):
            assert int((e_row[m] == e).sum()) == int((flat == e).sum())
        ref = reference(W, d, M, True)
        for kind in KIND_SPECS_LOCAL:
            for BN1, BN2 in [(64, 64), (128, 128)]:
                if N % BN1 or K % BN2:
                    continue
                out = _emu_kernels(W, d, BM, BN1, BN2, kind)
                err = rel_err(out, ref)
                assert err < 1e-2, (M, BM, kind, BN1, err)
                print("   %-27s BN=%d/%d rel err %.2e" % (kind, BN1, BN2, err))
        print("M=%d BM=%d layout ok, kernel emulation rel err vs reference %.2e (last)" % (M, BM, err))
    print("local checks passed")


if __name__ == "__main__":
    local_main()
