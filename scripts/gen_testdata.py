#!/usr/bin/env python3
"""Generate kimimoe's independent reference vectors.

Run on the GPU machine (it has torch 2.11, ml_dtypes 0.6.0, numpy, mpmath):

    python3 scripts/gen_testdata.py OUTDIR

It writes, under OUTDIR:
  formats.safetensors      scalar format vectors from ml_dtypes and torch
  activations.safetensors  activation values from mpmath at 50 digits
  oracle_*.safetensors     small MoE cases with the expected output computed
                           by an independent numpy float64 implementation

Nothing here imports kimimoe: the vectors are evidence from other
implementations, checked by the Go tests under testdata/. The files are
written with a hand-rolled safetensors writer (8-byte little-endian header
length, JSON header, raw little-endian data) so that the format itself is
also exercised independently of the Go reader.
"""
import json
import struct
import sys

import mpmath
import numpy as np

# ml_dtypes and torch are imported where they are used, so that the
# activation references (mpmath only) can be made on any machine.
ml_dtypes = torch = None


def need_ml_torch():
    global ml_dtypes, torch
    import ml_dtypes as _m
    import torch as _t
    ml_dtypes, torch = _m, _t

DT = {
    np.dtype(np.float64): "F64",
    np.dtype(np.float32): "F32",
    np.dtype(np.uint8): "U8",
    np.dtype(np.uint16): "U16",
    np.dtype(np.int32): "I32",
    np.dtype(np.int64): "I64",
}


def write_safetensors(path, tensors, metadata=None):
    header = {}
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    blobs = []
    off = 0
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr)
        b = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": DT[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    print(f"wrote {path}: {len(tensors)} tensors, {8 + len(h) + off} bytes")


# ---------------------------------------------------------------- formats
def formats(out):
    t = {}
    pats = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    # bf16 bit pattern i -> float32 (exact: bf16 is the top half of f32).
    bf = torch.from_numpy(pats.view(np.int16).copy()).view(torch.bfloat16)
    f32 = bf.float().numpy()
    assert np.array_equal(f32.view(np.uint32) >> 16, pats.astype(np.uint32))
    t["bf16_all_as_f32"] = f32
    t["e4m3_mldtypes_from_bf16"] = f32.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    t["e4m3_torch_from_bf16"] = torch.from_numpy(f32).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    e2 = f32.astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
    assert (e2 & 0xF0).max() == 0, "ml_dtypes float4 byte has high bits set"
    t["e2m1_mldtypes_from_bf16"] = e2

    codes = np.arange(256, dtype=np.uint8)
    t["e4m3_decode_mldtypes"] = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    t["e4m3_decode_torch"] = torch.from_numpy(codes.copy()).view(torch.float8_e4m3fn).float().numpy()
    t["e2m1_decode_mldtypes"] = np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    t["e8m0_decode_mldtypes"] = codes.view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    t["e8m0_decode_torch"] = torch.from_numpy(codes.copy()).view(torch.float8_e8m0fnu).float().numpy()

    # float32 samples: random bit patterns over the whole range, random values
    # around the E4M3/E2M1 ranges, and edge values.
    rng = np.random.default_rng(20261130)
    a = rng.integers(0, 2**32, size=65536, dtype=np.uint64).astype(np.uint32).view(np.float32)
    e = rng.uniform(-14, 10, size=65536)
    b = (np.sign(rng.uniform(-1, 1, size=65536)) * np.exp2(e)).astype(np.float32)
    edge = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 448, 464, 464.0001, 480, 65504,
                     3.4e38, 1e-45, -1e-45, 2**-9, 2**-10, 3 * 2**-11, 6, 5, 7, 0.25, 0.75],
                    dtype=np.float32)
    s = np.concatenate([a, b, edge])
    fin = s[np.isfinite(s)]
    t["f32_samples"] = s
    t["bf16_torch_from_f32"] = torch.from_numpy(s.copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    t["bf16_mldtypes_from_f32"] = s.astype(ml_dtypes.bfloat16).view(np.uint16)
    t["f32_finite_samples"] = fin
    t["e4m3_mldtypes_from_f32"] = fin.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    t["e4m3_torch_from_f32"] = torch.from_numpy(fin.copy()).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    t["e2m1_mldtypes_from_f32"] = fin.astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
    write_safetensors(f"{out}/formats.safetensors", t, {
        "made_by": "scripts/gen_testdata.py",
        "ml_dtypes": ml_dtypes.__version__, "torch": torch.__version__, "numpy": np.__version__})


# ------------------------------------------------------------ activations
mpmath.mp.dps = 50


def mp_sig(x):
    return 1 / (1 + mpmath.exp(-x))


# Both GELUs are written without the cancellation of 1 + erf(x) or
# 1 + tanh(z) for very negative x (which would lose every digit far out in
# the tail even at 50 digits): 1 + erf(x/sqrt2) = erfc(-x/sqrt2) and
# 1 + tanh(z) = 2 sigmoid(2z) are identities.
def mp_gelu(x):
    return x / 2 * mpmath.erfc(-x / mpmath.sqrt(2))


def mp_gelu_tanh(x):
    return x * mp_sig(2 * mpmath.sqrt(2 / mpmath.pi) * (x + mpmath.mpf("0.044715") * x**3))


def act_refs():
    # name -> (gated, function(gate, up, params))
    return {
        "gelu": (False, lambda g, u, p: mp_gelu(g)),
        "relu": (False, lambda g, u, p: max(g, 0)),
        "silu": (False, lambda g, u, p: g * mp_sig(g)),
        "relu2": (False, lambda g, u, p: max(g, 0) ** 2),
        "identity": (False, lambda g, u, p: g),
        "swiglu": (True, lambda g, u, p: g * mp_sig(g) * u),
        "geglu": (True, lambda g, u, p: mp_gelu(g) * u),
        "geglu_tanh": (True, lambda g, u, p: mp_gelu_tanh(g) * u),
        "swiglu_step": (True, lambda g, u, p: min(g * mp_sig(g), p["limit"]) * min(max(u, -p["limit"]), p["limit"])),
        "swiglu_oai": (True, lambda g, u, p: (lambda gg, uu: gg * mp_sig(p["alpha"] * gg) * (uu + p["beta"]))(
            min(g, p["limit"]), min(max(u, -p["limit"]), p["limit"]))),
        "situ": (True, lambda g, u, p: p["beta"] * mpmath.tanh(g / p["beta"]) * mp_sig(g) * p["lbeta"] * mpmath.tanh(u / p["lbeta"])),
    }


def activations(out):
    rng = np.random.default_rng(7)
    n = 1500
    g = np.concatenate([rng.normal(0, 3, n // 3), rng.uniform(-60, 60, n // 3), rng.normal(0, 0.3, n // 3),
                        [0.0, -0.0, 7.0, -7.0, 6.999, 7.001, 25.0, -25.0, 100.0, -100.0, 1e-8, -1e-8, 700.0, -700.0]])
    u = np.concatenate([rng.normal(0, 3, n // 3), rng.uniform(-60, 60, n // 3), rng.normal(0, 0.3, n // 3),
                        [0.0, 1.0, -7.0, 7.0, 7.001, -7.001, 25.0, -25.0, 100.0, -100.0, 1e-8, 3.0, -700.0, 700.0]])
    t = {"gate": g.astype(np.float64), "up": u.astype(np.float64)}
    default = {"beta": mpmath.mpf(4), "lbeta": mpmath.mpf(25), "alpha": mpmath.mpf("1.702"),
               "limit": mpmath.mpf(7), }
    oai_beta = mpmath.mpf(1)
    variants = {
        "": dict(default, beta=mpmath.mpf(4)),
        "_p2": {"beta": mpmath.mpf(2), "lbeta": mpmath.mpf(10), "alpha": mpmath.mpf(1), "limit": mpmath.mpf(5)},
    }
    for name, (gated, f) in act_refs().items():
        for suf, p in variants.items():
            p = dict(p)
            if name == "swiglu_oai":
                p["beta"] = oai_beta if suf == "" else mpmath.mpf("0.5")
            vals = [float(f(mpmath.mpf(float(a)), mpmath.mpf(float(b)), p)) for a, b in zip(g, u)]
            t[f"ref_{name}{suf}"] = np.array(vals, dtype=np.float64)
    write_safetensors(f"{out}/activations.safetensors", t, {
        "made_by": "scripts/gen_testdata.py activations", "mpmath": mpmath.__version__, "dps": "50",
        "params": "default: situ beta 4 linear_beta 25; swiglu_oai alpha 1.702 beta 1 limit 7; swiglu_step limit 7. "
                  "_p2: situ beta 2 linear_beta 10; swiglu_oai alpha 1 beta 0.5 limit 5; swiglu_step limit 5"})


# ----------------------------------------------------------------- oracle
E4M3_MAX, E2M1_MAX = 448.0, 6.0


def scale_exp(amax, recipe, elem):
    """Block scale exponent, computed exactly with frexp (amax = f * 2^e)."""
    if amax == 0:
        return -127
    f, e = np.frexp(amax)
    if recipe == "floor":
        x = (e - 1) - (8 if elem == "e4m3" else 2)
    else:  # rceil: smallest X with amax / 2^X <= maxpos
        mf, me = np.frexp(E4M3_MAX if elem == "e4m3" else E2M1_MAX)
        x = e - me if f <= mf else e - me + 1
    return int(min(max(x, -127), 127))


def mx_quant_e4m3(v, recipe):
    """v float64 [..., K] -> (codes uint8, scales uint8). Finite inputs only."""
    sh = v.shape
    blocks = v.reshape(-1, 32)
    codes = np.empty(blocks.shape, np.uint8)
    scales = np.empty(blocks.shape[0], np.uint8)
    for i, blk in enumerate(blocks):
        x = scale_exp(float(np.max(np.abs(blk))), recipe, "e4m3")
        s = np.clip(blk * 2.0 ** (-x), -E4M3_MAX, E4M3_MAX)
        codes[i] = s.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
        scales[i] = x + 127
    return codes.reshape(sh), scales.reshape(sh[:-1] + (sh[-1] // 32,))


def dq_e4m3(codes, scales):
    v = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    s = np.exp2(scales.astype(np.float64) - 127)
    return (v.reshape(v.shape[:-1] + (-1, 32)) * s[..., None]).reshape(v.shape)


def dq_e2m1_packed(packed, scales):
    lo = packed & 0x0F
    hi = packed >> 4
    codes = np.stack([lo, hi], axis=-1).reshape(packed.shape[:-1] + (packed.shape[-1] * 2,))
    v = codes.astype(np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float64)
    s = np.exp2(scales.astype(np.float64) - 127)
    return (v.reshape(v.shape[:-1] + (-1, 32)) * s[..., None]).reshape(v.shape)


def np_act(name, g, u, p):
    sig = lambda z: 1 / (1 + np.exp(-z))
    if name == "situ":
        return p["beta"] * np.tanh(g / p["beta"]) * sig(g) * p["lbeta"] * np.tanh(u / p["lbeta"])
    if name == "swiglu_oai":
        gg = np.minimum(g, p["limit"])
        uu = np.clip(u, -p["limit"], p["limit"])
        return gg * sig(p["alpha"] * gg) * (uu + p["beta"])
    if name == "swiglu":
        return g * sig(g) * u
    if name == "relu2":
        return np.maximum(g, 0) ** 2
    raise ValueError(name)


def local_slots(ids, ep_rank, E_local):
    """(token, slot, local expert) of each slot of ids [M, topk] routed to
    this rank's experts, in token then slot order (the sum's order); -1
    slots and other ranks' experts are skipped."""
    M, topk = ids.shape
    for t in range(M):
        for k in range(topk):
            e = int(ids[t, k]) - ep_rank * E_local
            if ids[t, k] >= 0 and 0 <= e < E_local:
                yield t, k, e


def oracle_case(out, tag, rng, M, K, N, E_local, topk, act, chain, recipe, ep_size=1, ep_rank=0,
                given_xq=False, mask_slot=False, params=None):
    gated = act not in ("relu2",)
    rows = 2 * N if gated else N
    E_glob = E_local * ep_size
    x = rng.normal(0, 1, size=(M, K)).astype(np.float32)
    xq, xs = mx_quant_e4m3(x.astype(np.float64), recipe)
    w31 = rng.integers(0, 256, size=(E_local, rows, K // 2), dtype=np.uint8)
    w31s = rng.integers(121, 126, size=(E_local, rows, K // 32), dtype=np.uint8)
    w2 = rng.integers(0, 256, size=(E_local, K, N // 2), dtype=np.uint8)
    w2s = rng.integers(119, 124, size=(E_local, K, N // 32), dtype=np.uint8)
    ids = np.stack([rng.choice(E_glob, size=topk, replace=False) for _ in range(M)]).astype(np.int32)
    if mask_slot:
        ids[0, topk - 1] = -1
        ids[M - 1, 0] = -1
    wts = rng.uniform(0.05, 1.0, size=(M, topk)).astype(np.float32)
    p = params or {}
    W31 = dq_e2m1_packed(w31, w31s)
    W2 = dq_e2m1_packed(w2, w2s)
    X = dq_e4m3(xq, xs)
    ref = np.zeros((M, K), np.float64)
    for t, k, e in local_slots(ids, ep_rank, E_local):
        h = W31[e] @ X[t]
        a = np_act(act, h[N:], h[:N], p) if gated else np_act(act, h, None, p)
        if chain == "mxfp8":
            aq, as_ = mx_quant_e4m3(a, recipe)
            a = dq_e4m3(aq, as_)
        y = W2[e] @ a
        ref[t] += float(wts[t, k]) * y
    tensors = {}
    if given_xq:
        tensors["x_q"] = xq
        tensors["x_scale"] = xs
    else:
        tensors["x"] = x
    tensors.update({"topk_ids": ids, "topk_weights": wts, "w31": w31, "w31_scale": w31s,
                    "w2": w2, "w2_scale": w2s, "out_ref_f64": ref})
    meta = {"activation": act, "recipe": recipe, "chain": chain, "ep_size": ep_size, "ep_rank": ep_rank,
            "made_by": "scripts/gen_testdata.py (numpy float64 reference, ml_dtypes decode)"}
    if act == "situ":
        meta.update(situ_beta=p["beta"], situ_linear_beta=p["lbeta"])
    if act == "swiglu_oai":
        meta.update(swiglu_alpha=p["alpha"], swiglu_beta=p["beta"], swiglu_limit=p["limit"])
    write_safetensors(f"{out}/oracle_{tag}.safetensors", tensors, meta)


def oracle(out):
    rng = np.random.default_rng(3584)
    oracle_case(out, "situ_exact_rceil", rng, M=8, K=256, N=64, E_local=4, topk=2, act="situ",
                chain="exact", recipe="rceil", params={"beta": 4.0, "lbeta": 25.0})
    oracle_case(out, "oai_mxfp8_floor_ep2", rng, M=5, K=128, N=96, E_local=6, topk=4, act="swiglu_oai",
                chain="mxfp8", recipe="floor", ep_size=2, ep_rank=1, mask_slot=True,
                params={"alpha": 1.702, "beta": 1.0, "limit": 7.0})
    oracle_case(out, "situ_mxfp8_rceil_xq", rng, M=4, K=64, N=32, E_local=3, topk=3, act="situ",
                chain="mxfp8", recipe="rceil", given_xq=True, params={"beta": 4.0, "lbeta": 25.0})
    oracle_case(out, "relu2_exact_floor", rng, M=3, K=96, N=64, E_local=2, topk=2, act="relu2",
                chain="exact", recipe="floor")


def bf16_of_f64(v):
    """Round float64 to the nearest bf16 (ties to even) once, exactly: 8
    significant bits by frexp and rint, no detour through float32."""
    m, e = np.frexp(v)
    return np.ldexp(np.rint(m * 256.0), e - 8)


def f32_situ(g, u, beta, lbeta):
    """SiTU with every operation rounded to float32, left to right; tanh
    and exp are numpy's float64 functions rounded once to float32."""
    f = np.float32
    b, lb = f(beta), f(lbeta)
    tanh32 = lambda z: np.tanh(z.astype(np.float64)).astype(f)
    sig32 = lambda z: (f(1) / (f(1) + np.exp((-z).astype(np.float64)).astype(f))).astype(f)
    left = ((b * tanh32((g / b).astype(f))).astype(f) * sig32(g)).astype(f)
    right = (lb * tanh32((u / lb).astype(f))).astype(f)
    return (left * right).astype(f)


def random_layer(rng, M, K, N, E_local, topk, E_glob, mask_slot):
    """The weights (MXFP4 codes, scales near 2^-4), biases and routing of a
    reference case, drawn in this order (the committed files depend on it);
    with mask_slot, token 0's last slot is -1."""
    f, rows = np.float32, 2 * N
    w31 = rng.integers(0, 256, size=(E_local, rows, K // 2), dtype=np.uint8)
    w31s = rng.integers(121, 126, size=(E_local, rows, K // 32), dtype=np.uint8)
    w2 = rng.integers(0, 256, size=(E_local, K, N // 2), dtype=np.uint8)
    w2s = rng.integers(119, 124, size=(E_local, K, N // 32), dtype=np.uint8)
    b1 = rng.normal(0, 0.5, size=(E_local, rows)).astype(f)
    b2 = rng.normal(0, 0.5, size=(E_local, K)).astype(f)
    ids = np.stack([rng.choice(E_glob, size=topk, replace=False) for _ in range(M)]).astype(np.int32)
    if mask_slot:
        ids[0, topk - 1] = -1
    wts = rng.uniform(0.05, 1.0, size=(M, topk)).astype(f)
    return w31, w31s, w2, w2s, b1, b2, ids, wts


def flashinfer_case(out, tag, rng, M, K, N, E_local, topk, ep_size=1, ep_rank=0, mask_slot=False):
    """The flashinfer chain (FlashInfer's / TensorRT-LLM's CUTLASS MoE): GEMM1
    exact then bf16, + b1 in float32, SiTU in float32 then bf16, MXFP8 rceil,
    GEMM2 exact then float32 then bf16 (the stored row), and the finalize's
    float32 sum in slot order of float32(w) * (row + b2)."""
    f = np.float32
    E_glob = E_local * ep_size
    x = rng.normal(0, 1, size=(M, K)).astype(f)
    xq, xs = mx_quant_e4m3(x.astype(np.float64), "rceil")
    w31, w31s, w2, w2s, b1, b2, ids, wts = random_layer(rng, M, K, N, E_local, topk, E_glob, mask_slot)
    W31, W2, X = dq_e2m1_packed(w31, w31s), dq_e2m1_packed(w2, w2s), dq_e4m3(xq, xs)
    ref = np.zeros((M, K), f)
    for t, k, e in local_slots(ids, ep_rank, E_local):
        h = (bf16_of_f64(W31[e] @ X[t]).astype(f) + b1[e]).astype(f)
        a = f32_situ(h[N:], h[:N], 4.0, 25.0).astype(ml_dtypes.bfloat16).astype(f)
        aq, as_ = mx_quant_e4m3(a.astype(np.float64), "rceil")
        y = (W2[e] @ dq_e4m3(aq, as_)).astype(f)
        r = (y.astype(ml_dtypes.bfloat16).astype(f) + b2[e]).astype(f)
        ref[t] = (ref[t] + (wts[t, k] * r).astype(f)).astype(f)
    tensors = {"x": x, "topk_ids": ids, "topk_weights": wts, "w31": w31, "w31_scale": w31s,
               "w2": w2, "w2_scale": w2s, "w31_bias": b1, "w2_bias": b2, "out_ref_f32": ref}
    meta = {"activation": "situ", "recipe": "rceil", "chain": "flashinfer", "ep_size": ep_size,
            "ep_rank": ep_rank, "situ_beta": 4.0, "situ_linear_beta": 25.0,
            "made_by": "scripts/gen_testdata.py flashinfer (numpy float32 emulation, ml_dtypes bf16)"}
    write_safetensors(f"{out}/flashinfer_{tag}.safetensors", tensors, meta)


def bf16_case(out, tag, rng, M, K, N, E_local, topk, ep_size=1, ep_rank=0, mask_slot=False, bias=True):
    """The bf16 chain (W4A16, as triton_kernels' matmul_ogs and Marlin run
    it): x in BF16, GEMM1 exact (float64) then float32, + b1 in float32,
    SiTU in float32 then BF16, GEMM2 exact then float32, + b2 in float32,
    each slot's float32(w) * y stored as BF16, summed in float32 in slot
    order."""
    f, bf = np.float32, ml_dtypes.bfloat16
    E_glob = E_local * ep_size
    x = rng.normal(0, 1, size=(M, K)).astype(bf).astype(f)
    w31, w31s, w2, w2s, b1, b2, ids, wts = random_layer(rng, M, K, N, E_local, topk, E_glob, mask_slot)
    W31, W2 = dq_e2m1_packed(w31, w31s), dq_e2m1_packed(w2, w2s)
    ref = np.zeros((M, K), f)
    for t, k, e in local_slots(ids, ep_rank, E_local):
        h = (W31[e] @ x[t].astype(np.float64)).astype(f)
        if bias:
            h = (h + b1[e]).astype(f)
        a = f32_situ(h[N:], h[:N], 4.0, 25.0).astype(bf).astype(f)
        y = (W2[e] @ a.astype(np.float64)).astype(f)
        if bias:
            y = (y + b2[e]).astype(f)
        s_k = (wts[t, k] * y).astype(f).astype(bf).astype(f)
        ref[t] = (ref[t] + s_k).astype(f)
    tensors = {"x": x, "topk_ids": ids, "topk_weights": wts, "w31": w31, "w31_scale": w31s,
               "w2": w2, "w2_scale": w2s, "out_ref_f32": ref}
    if bias:
        tensors.update({"w31_bias": b1, "w2_bias": b2})
    meta = {"activation": "situ", "recipe": "rceil", "chain": "bf16", "ep_size": ep_size,
            "ep_rank": ep_rank, "situ_beta": 4.0, "situ_linear_beta": 25.0,
            "made_by": "scripts/gen_testdata.py bf16 (numpy float32 emulation, ml_dtypes bf16)"}
    write_safetensors(f"{out}/bf16_{tag}.safetensors", tensors, meta)


def bf16(out):
    rng = np.random.default_rng(2880)
    bf16_case(out, "situ_bias", rng, M=8, K=256, N=64, E_local=4, topk=3, mask_slot=True)
    bf16_case(out, "situ_ep2", rng, M=6, K=128, N=96, E_local=3, topk=4, ep_size=2, ep_rank=1, bias=False)


def bf16_torch_case(out, tag, rng, M, K, N, E_local, topk, act, params, ep_size=1, ep_rank=0, mask_slot=False):
    """The bf16 chain again, computed by torch alone (independent of the numpy
    emulation above and of kimimoe): x drawn N(0, 1) by torch in float64 and
    cast to BF16 by torch; the weights decoded by torch from a table of the 16
    E2M1 values and torch.exp2 of the scales; each GEMM a torch float64 matmul
    rounded once to float32; the biases added in float32; the activation with
    every operation in float32, tanh and exp torch's float64 functions rounded
    once to float32 (the contract's order of operations); the intermediate,
    and each slot's float32 w * y, cast to BF16 by torch; the float32 sum in
    slot order from 0. The codes, scales, biases and routing are drawn by
    random_layer (numpy)."""
    f32, f64, bf = torch.float32, torch.float64, torch.bfloat16
    E_glob = E_local * ep_size
    gen = torch.Generator().manual_seed(int(rng.integers(1 << 31)))
    x = torch.randn(M, K, generator=gen, dtype=f64).to(bf).to(f32)
    w31, w31s, w2, w2s, b1, b2, ids, wts = random_layer(rng, M, K, N, E_local, topk, E_glob, mask_slot)
    lut = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=f64)

    def dequant(q, s):  # [E, R, C/2] codes (element 2j low), [E, R, C/32] E8M0 -> float64 [E, R, C]
        q, s = torch.from_numpy(q).long(), torch.from_numpy(s).to(f64)
        v = torch.stack([lut[q & 0xF], lut[q >> 4]], dim=-1).flatten(-2)
        return (v.unflatten(-1, (-1, 32)) * torch.exp2(s - 127.0).unsqueeze(-1)).flatten(-2)

    W31, W2 = dequant(w31, w31s), dequant(w2, w2s)
    B1, B2, WT = torch.from_numpy(b1), torch.from_numpy(b2), torch.from_numpy(wts)
    tanh32 = lambda z: torch.tanh(z.to(f64)).to(f32)
    sig32 = lambda z: 1.0 / (1.0 + torch.exp((-z).to(f64)).to(f32))  # float32 add and divide

    def activation(g, u):  # float32 tensors, left to right as the contract writes them
        if act == "situ":
            b, lb = torch.tensor(params["beta"], dtype=f32), torch.tensor(params["lbeta"], dtype=f32)
            return b * tanh32(g / b) * sig32(g) * (lb * tanh32(u / lb))
        lim = torch.tensor(params["limit"], dtype=f32)
        alpha, beta = torch.tensor(params["alpha"], dtype=f32), torch.tensor(params["beta"], dtype=f32)
        g, u = torch.minimum(g, lim), torch.clamp(u, -lim, lim)
        return g * sig32(alpha * g) * (u + beta)

    ref = torch.zeros(M, K, dtype=f32)
    for t, k, e in local_slots(ids, ep_rank, E_local):
        h = (W31[e] @ x[t].to(f64)).to(f32) + B1[e]
        a = activation(h[N:], h[:N]).to(bf).to(f64)
        y = (W2[e] @ a).to(f32) + B2[e]
        ref[t] = ref[t] + (WT[t, k] * y).to(bf).to(f32)
    tensors = {"x": x.numpy(), "topk_ids": ids, "topk_weights": wts, "w31": w31, "w31_scale": w31s,
               "w2": w2, "w2_scale": w2s, "w31_bias": b1, "w2_bias": b2, "out_ref_f32": ref.numpy()}
    meta = {"activation": act, "recipe": "rceil", "chain": "bf16", "ep_size": ep_size, "ep_rank": ep_rank,
            "made_by": "scripts/gen_testdata.py bf16_torch (torch %s: float64 matmuls, float32 activation, "
                       "torch bf16 casts)" % torch.__version__}
    if act == "situ":
        meta.update(situ_beta=params["beta"], situ_linear_beta=params["lbeta"])
    else:
        meta.update(swiglu_alpha=params["alpha"], swiglu_beta=params["beta"], swiglu_limit=params["limit"])
    write_safetensors(f"{out}/bf16_torch_{tag}.safetensors", tensors, meta)


def bf16_torch(out):
    rng = np.random.default_rng(31)
    bf16_torch_case(out, "situ_ep2_bias", rng, M=16, K=256, N=128, E_local=4, topk=4, act="situ",
                    params={"beta": 4.0, "lbeta": 25.0}, ep_size=2, ep_rank=1, mask_slot=True)
    # GPT-OSS's activation at a K and N that are not multiples of 128 (as its 2880).
    bf16_torch_case(out, "oai_k160_n96", rng, M=12, K=160, N=96, E_local=4, topk=4, act="swiglu_oai",
                    params={"alpha": 1.702, "beta": 1.0, "limit": 7.0}, mask_slot=True)


def flashinfer(out):
    rng = np.random.default_rng(4597)
    flashinfer_case(out, "situ_bias", rng, M=8, K=256, N=64, E_local=4, topk=3, mask_slot=True)
    flashinfer_case(out, "situ_ep2", rng, M=6, K=128, N=96, E_local=3, topk=4, ep_size=2, ep_rank=1)


if __name__ == "__main__":
    # usage: gen_testdata.py OUTDIR [formats|activations|oracle|flashinfer|bf16|bf16_torch ...]
    out = sys.argv[1]
    parts = sys.argv[2:] or ["formats", "activations", "oracle", "flashinfer", "bf16", "bf16_torch"]
    if any(p != "activations" for p in parts):
        need_ml_torch()
    for part in parts:
        {"formats": formats, "activations": activations, "oracle": oracle, "flashinfer": flashinfer, "bf16": bf16,
         "bf16_torch": bf16_torch}[part](out)
