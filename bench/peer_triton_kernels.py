#!/usr/bin/env python3
"""Peer benchmark: OpenAI `triton_kernels` (triton-lang/triton, python/triton_kernels) MXFP4 MoE.

What is timed is the GPT-OSS-on-Hopper path that vLLM uses (OAITritonExperts /
triton_kernel_fused_experts): BF16 activations x MXFP4 weights (E2M1 values + E8M0
scale per 32 along K), weights swizzled into the Hopper value/scale layouts the way
vLLM's `_swizzle_mxfp4` does, routing metadata built from (topk_ids, topk_weights),
FC1 = matmul_ogs with gather + fused SwiGLU epilogue, FC2 = matmul_ogs with scatter
and the routing gammas (top-k reduction inside matmul_ogs).

On Hopper triton_kernels has no native MXFP4 MMA: the kernel upcasts the MXFP4
weights to BF16 in registers and runs a BF16 wgmma/mma; activations must be BF16
(that is the only activation dtype vLLM feeds this path with on Hopper).

Workload: E=28 local experts, hidden K=3584, expert intermediate N=3072,
top-k = 8 distinct experts per token over the 28 local ones, seeded uniform routing,
routing weights summing to 1.

Environment knobs:
  PEER_BUDGET_S   wall-clock budget in seconds (default 240); stops cleanly, writing
                  what it has.
  PEER_M          comma-separated token counts (default: the 12 of the brief).
  PEER_CHECK_M    comma-separated M values to check against the fp32 reference.
  PEER_SHAPE      kimi (default), gpt-oss-120b or gpt-oss-20b; PEER_E, PEER_K, PEER_N,
                  PEER_TOPK override one value.
  PEER_BIAS       1: FC1 and FC2 biases, as GPT-OSS's layers have (default 1 for the
                  GPT-OSS shapes, 0 for Kimi's).
  PEER_ALT_NUM_WARPS  extra graph-only sweep (M <= 512) with the scales swizzled for this
                  num_warps (default 4, triton_kernels' own bench choice; 0 = off).
  PEER_SUSTAIN_ROUNDS  n > 0: after each M's graph timing, n more replays back to back,
                  each after the L2 flush, as a sustained load for bench/power.sh; their
                  median is sustained_ms and their wall-clock window (Unix seconds)
                  sustained_window.
  OUT             output folder (default ./out_local); writes peer_triton_kernels.json
                  and peer_triton_kernels.log there.
"""
import datetime
import json
import os
import sys
import time
import traceback

T0 = time.time()
HERE = os.path.dirname(os.path.abspath(__file__))
# The triton_kernels package is not part of this repository: point
# TRITON_KERNELS_SRC at python/triton_kernels of triton-lang/triton at tag
# v3.6.0 (the folder that holds the triton_kernels package).
SRC = os.environ.get("TRITON_KERNELS_SRC")
if not SRC or not os.path.isdir(os.path.join(SRC, "triton_kernels")):
    sys.exit("peer_triton_kernels.py: set TRITON_KERNELS_SRC to the folder holding the triton_kernels package "
             "(python/triton_kernels of triton-lang/triton at v3.6.0)")
sys.path.insert(0, SRC)

BUDGET_S = float(os.environ.get("PEER_BUDGET_S", "240"))
OUT = os.environ.get("OUT") or os.path.join(HERE, "out_local")
os.makedirs(OUT, exist_ok=True)
JSON_PATH = os.path.join(OUT, "peer_triton_kernels.json")
LOG_PATH = os.path.join(OUT, "peer_triton_kernels.log")
_LOG = open(LOG_PATH, "w")

# The release whose triton_kernels this script was written against.
TK_TAG = "v3.6.0"
TK_COMMIT = "7c56a5e40f7fd928dfd5c72902d5def0097db73a"

# Workload of the brief.
# PEER_SHAPE=kimi (default: Kimi-K3 EP32 rank-7 local shape) or gpt-oss-120b / gpt-oss-20b
# (K = N = 2880, 128 / 32 experts, top-4); PEER_E, PEER_K, PEER_N, PEER_TOPK override one value.
_SHAPES = {"kimi": (28, 3584, 3072, 8), "gpt-oss-120b": (128, 2880, 2880, 4), "gpt-oss-20b": (32, 2880, 2880, 4)}
SHAPE = os.environ.get("PEER_SHAPE", "kimi")
E, K, N, TOPK = _SHAPES[SHAPE]
E = int(os.environ.get("PEER_E", E))          # local experts
K = int(os.environ.get("PEER_K", K))          # hidden size (FC1 reduction dim, FC2 output dim)
N = int(os.environ.get("PEER_N", N))          # expert intermediate size (FC1 has 2N outputs: gate/up interleaved)
TOPK = int(os.environ.get("PEER_TOPK", TOPK)) # local top-k slots per token
# PEER_BIAS=1 adds FC1 and FC2 biases (float32, N(0, 1/4)), as GPT-OSS's
# layers have and vLLM passes them; the default is on for the GPT-OSS shapes.
BIAS = os.environ.get("PEER_BIAS", "1" if SHAPE.startswith("gpt-oss") else "0") == "1"
SWIGLU_ALPHA = 1.702   # GPT-OSS values, as vLLM passes them
SWIGLU_LIMIT = 7.0
NUM_WARPS_SWIZZLE = 8  # vLLM's value for the non-batched MoE path
ALT_NUM_WARPS = int(os.environ.get("PEER_ALT_NUM_WARPS", "4") or 0)  # 0 disables the extra sweep
SUSTAIN_ROUNDS = int(os.environ.get("PEER_SUSTAIN_ROUNDS", "0") or 0)
M_LIST_DEFAULT = [1, 2, 4, 8, 16, 32, 128, 256, 512, 1024, 2048, 8192]
CHECK_M_DEFAULT = [1, 8, 32, 256, 2048, 8192]
SEED = 20240607


def _parse_list(name, default):
    v = os.environ.get(name)
    if not v:
        return list(default)
    return [int(x) for x in v.replace(" ", "").split(",") if x]


M_LIST = _parse_list("PEER_M", M_LIST_DEFAULT)
CHECK_M = set(_parse_list("PEER_CHECK_M", CHECK_M_DEFAULT))


def log(*args):
    line = "[%7.1fs] %s" % (time.time() - T0, " ".join(str(a) for a in args))
    print(line, flush=True)
    _LOG.write(line + "\n")
    _LOG.flush()


def time_left():
    return BUDGET_S - (time.time() - T0)


RESULT = {
    "peer": "triton_kernels",
    "peer_version": "triton_kernels matmul_ogs %s (%s)" % (TK_TAG, TK_COMMIT[:12]),
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "device": None,
    "software": {},
    "workload": {
        "E_local": E, "K_hidden": K, "N_intermediate": N, "topk_local": TOPK,
        "fc1_weight": "[E, 2N, K] MXFP4 (E2M1, E8M0 scale per 32 along K), gate/up rows interleaved",
        "fc2_weight": "[E, K, N] MXFP4 (E2M1, E8M0 scale per 32 along N)",
        "activations": "BF16 in, BF16 out (BF16 intermediate)",
        "bias": "FC1 [E, 2N] and FC2 [E, K], float32 N(0, 1/4)" if BIAS else None,
        "activation_fn": "triton_kernels fused SwiGLU epilogue (GPT-OSS clamped variant, alpha=%g, limit=%g)"
                         % (SWIGLU_ALPHA, SWIGLU_LIMIT),
        "shape": SHAPE, "routing": "seeded uniform: each token picks TOPK distinct experts of E uniformly at random "
                   "(argsort of uniform noise); weights = softmax of gaussian logits over the 8 slots, "
                   "rounded to bf16 (as vLLM feeds them)",
    },
    "timing": {
        "median_ms": "triton.testing.do_bench(return_mode='median', warmup=25, rep=100), L2 flushed before "
                     "every call; one MoE layer = routing metadata from (topk_ids, topk_weights) + FC1 + FC2",
        "graph_ms": "the same layer captured once in a torch.cuda.CUDAGraph; median of replays, L2 flushed "
                    "(256 MB memset) before every replay, CUDA events around the replay only",
        "median_ms_gemms / graph_ms_gemms": "FC1 + FC2 only (routing metadata prebuilt)",
        "graph_ms_hot": "same graph, back-to-back replays without L2 flush",
        "note": "eager do_bench numbers at small M are bound by triton_kernels' Python-side launch "
                "work (matmul_ogs builds its arguments in Python every call); the graph numbers remove it",
        "rel_err": "||y - y_ref||_F / ||y_ref||_F, y_ref = float32 torch on the dequantized MXFP4 weights "
                   "(same bf16 inputs and bf16 routing weights; no intermediate rounding in the reference)",
    },
    "budget_s": BUDGET_S,
    "rows": [],
    "notes": [],
    "stopped_early": False,
}


def write_json():
    RESULT["elapsed_s"] = round(time.time() - T0, 1)
    tmp = JSON_PATH + ".tmp"
    with open(tmp, "w") as f:
        json.dump(RESULT, f, indent=1)
    os.replace(tmp, JSON_PATH)


def note(msg):
    log("NOTE:", msg)
    RESULT["notes"].append(msg)
    write_json()


try:  # torch/triton exist on the GPU machine only; the module still compiles without them
    import torch  # noqa: F401
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover
    triton = None

if triton is not None:
    @triton.jit
    def _pack_topk_bits(Bits, Ids, n_rows, N_WORDS: tl.constexpr, TOPK_: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
        """Bitmatrix of the routing: one uint32 word per 32 experts and token row; bit
        (id % 32) of word (id // 32) is set for every selected expert id (own code; same
        output as vLLM's pack_bitmatrix)."""
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.arange(0, BLOCK_K)
        rmask = rows < n_rows
        ids = tl.load(Ids + rows[:, None] * TOPK_ + cols[None, :],
                      mask=rmask[:, None] & (cols < TOPK_)[None, :], other=-1).to(tl.int32)
        valid = ids >= 0
        ids = tl.where(valid, ids, 0)
        zero = tl.zeros([BLOCK_M, BLOCK_K], dtype=tl.uint32)
        one = tl.full([BLOCK_M, BLOCK_K], 1, dtype=tl.uint32)
        bit = tl.where(valid, one << (ids % 32).to(tl.uint32), zero)
        word = ids // 32
        for w in tl.static_range(N_WORDS):
            packed = tl.reduce_or(tl.where(word == w, bit, zero), axis=1)
            tl.store(Bits + rows * N_WORDS + w, packed, mask=rmask)


def main():
    if triton is None:
        note("torch/triton not importable; nothing to do")
        return

    if not torch.cuda.is_available():
        note("no CUDA device; nothing to do")
        return
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(0)
    RESULT["device"] = "%s (sm_%d%d, %d SMs, %.0f GiB)" % (
        props.name, props.major, props.minor, props.multi_processor_count, props.total_memory / 2**30)
    RESULT["software"] = {
        "python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda,
        "triton": triton.__version__,
    }
    log("device:", RESULT["device"], "| torch", torch.__version__, "| triton", triton.__version__)
    write_json()

    import triton_kernels
    import triton_kernels.swiglu
    from triton_kernels.matmul_ogs import (FlexCtx, FnSpecs, FusedActivation, GatherIndx, PrecisionConfig,
                                           RoutingData, ScatterIndx, matmul_ogs)
    import triton_kernels.matmul_ogs as tk_matmul_mod
    from triton_kernels.numerics import InFlexData
    from triton_kernels.numerics_details.mxfp import upcast_from_mxfp_torch
    from triton_kernels.tensor import (BIT, FP4, Bitmatrix, SparseMatrix, convert_layout,
                                       make_ragged_tensor_metadata, wrap_torch_tensor)
    from triton_kernels.tensor_details import layout

    # Where the package came from, relative to TRITON_KERNELS_SRC (the
    # user's own folder says nothing about the measurement).
    RESULT["software"]["triton_kernels_file"] = os.path.join("$TRITON_KERNELS_SRC", os.path.relpath(triton_kernels.__file__, SRC))
    log("triton_kernels from", triton_kernels.__file__)
    if not triton_kernels.__file__.startswith(SRC):
        note("WARNING: triton_kernels was not imported from TRITON_KERNELS_SRC")

    # ------------------------------------------------------------------ weights
    gen = torch.Generator(device=dev)
    gen.manual_seed(SEED)
    t = time.time()

    def rand_mxfp4(rows, cols):
        """Random MXFP4 tensor [E, rows, cols] (cols = logical reduction dim): packed codes
        [E, rows, cols/2] (low nibble = even element) and E8M0 scales [E, rows, cols/32]."""
        q = torch.empty((E, rows, cols // 2), dtype=torch.uint8, device=dev)
        s = torch.empty((E, rows, cols // 32), dtype=torch.uint8, device=dev)
        for e in range(E):
            q[e] = torch.randint(0, 256, (rows, cols // 2), device=dev, generator=gen, dtype=torch.int16).to(torch.uint8)
            # 2^-9 .. 2^-5: keeps FC1 outputs O(1) so the SwiGLU clamp is rarely hit
            s[e] = torch.randint(118, 123, (rows, cols // 32), device=dev, generator=gen, dtype=torch.int16).to(torch.uint8)
        return q, s

    w1_q, w1_s = rand_mxfp4(2 * N, K)   # FC1 [E, 2N, K]
    w2_q, w2_s = rand_mxfp4(K, N)       # FC2 [E, K, N]
    b1 = b2 = None
    if BIAS:  # rows as FC1's (gate/up interleaved)
        b1 = torch.randn((E, 2 * N), device=dev, generator=gen) * 0.5
        b2 = torch.randn((E, K), device=dev, generator=gen) * 0.5
    torch.cuda.synchronize()
    log("random MXFP4 weights made in %.1fs: w1 %s/%s, w2 %s/%s" % (
        time.time() - t, tuple(w1_q.shape), tuple(w1_s.shape), tuple(w2_q.shape), tuple(w2_s.shape)))

    lut = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                        -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=torch.float32, device=dev)

    def dequant(q, s):
        """Own torch dequant (independent of triton_kernels): [..., R, C/2] u8 + [..., R, C/32] u8 -> fp32 [..., R, C]."""
        v = torch.stack([lut[(q & 0xF).long()], lut[(q >> 4).long()]], dim=-1).flatten(-2)
        scale = torch.exp2(s.float() - 127.0)
        v = v.unflatten(-1, (v.shape[-1] // 32, 32)) * scale.unsqueeze(-1)
        return v.flatten(-2)

    # dequantized copies for the reference; bf16 holds E2M1 x 2^k exactly (lossless)
    w1_ref = torch.empty((E, 2 * N, K), dtype=torch.bfloat16, device=dev)
    w2_ref = torch.empty((E, K, N), dtype=torch.bfloat16, device=dev)
    for e in range(E):
        w1_ref[e] = dequant(w1_q[e], w1_s[e]).to(torch.bfloat16)
        w2_ref[e] = dequant(w2_q[e], w2_s[e]).to(torch.bfloat16)
    # self-check of the nibble/scale convention against triton_kernels' own torch upcast
    chk = upcast_from_mxfp_torch(w1_q[0], w1_s[0], torch.float32, axis=-1)
    same = torch.equal(chk, w1_ref[0].float())
    log("own dequant == triton_kernels.upcast_from_mxfp_torch on expert 0:", same)
    RESULT["dequant_matches_triton_kernels_torch_upcast"] = bool(same)
    if not same:
        note("own dequant differs from upcast_from_mxfp_torch; reference uses the latter")
        for e in range(E):
            w1_ref[e] = upcast_from_mxfp_torch(w1_q[e], w1_s[e], torch.bfloat16, axis=-1)
            w2_ref[e] = upcast_from_mxfp_torch(w2_q[e], w2_s[e], torch.bfloat16, axis=-1)
    del chk

    # ------------------------------------------------ swizzle, as vLLM _swizzle_mxfp4
    def swizzle_mxfp4(quant_tensor, scale, num_warps):
        value_layout, value_layout_opts = layout.make_default_matmul_mxfp4_w_layout(mx_axis=1)
        scale_layout, scale_layout_opts = layout.make_default_matmul_mxfp4_w_scale_layout(
            mx_axis=1, num_warps=num_warps)
        # transpose so that the quantization axis is dim 1 ([E, K, N] logical, column-major view)
        quant_tensor = quant_tensor.transpose(-2, -1)
        scale = scale.transpose(-2, -1)
        quant_tensor = convert_layout(wrap_torch_tensor(quant_tensor, dtype=FP4), value_layout, **value_layout_opts)
        scale = convert_layout(wrap_torch_tensor(scale), scale_layout, **scale_layout_opts)
        return quant_tensor, InFlexData(), scale, value_layout.__name__, scale_layout.__name__

    t = time.time()
    w1_tk, w1_flex, w1_scale_tk, vl, sl = swizzle_mxfp4(w1_q, w1_s, NUM_WARPS_SWIZZLE)
    w2_tk, w2_flex, w2_scale_tk, _, _ = swizzle_mxfp4(w2_q, w2_s, NUM_WARPS_SWIZZLE)
    torch.cuda.synchronize()
    log("swizzled in %.1fs: value layout %s, scale layout %s (num_warps=%d); w1 logical %s, w2 logical %s" % (
        time.time() - t, vl, sl, NUM_WARPS_SWIZZLE, list(w1_tk.shape), list(w2_tk.shape)))
    RESULT["layouts"] = {"value": vl, "scale": sl, "scale_num_warps": NUM_WARPS_SWIZZLE}
    pc1 = PrecisionConfig(weight_scale=w1_scale_tk, flex_ctx=FlexCtx(rhs_data=w1_flex))
    pc2 = PrecisionConfig(weight_scale=w2_scale_tk, flex_ctx=FlexCtx(rhs_data=w2_flex))
    act = FusedActivation(
        FnSpecs("swiglu", triton_kernels.swiglu.swiglu_fn, ("alpha", "limit"), reduction_n=2),
        (SWIGLU_ALPHA, SWIGLU_LIMIT))

    # ------------------------------------------------------------------ routing
    def make_routing(topk_ids, topk_weights, n_expts):
        """(topk_ids [M, k], topk_weights [M, k]) -> RoutingData, GatherIndx, ScatterIndx.
        Same construction as vLLM's make_routing_data (bitmatrix -> SparseMatrix ->
        make_ragged_tensor_metadata) and as triton_kernels' own single-GPU routing."""
        ids = topk_ids.to(torch.int16)
        vals = topk_weights.to(torch.bfloat16)
        n_rows, k = ids.shape
        n_words = triton.cdiv(n_expts, 32)
        bits = torch.empty((n_rows, n_words), dtype=torch.uint32, device=ids.device)
        BLOCK_M = 128
        _pack_topk_bits[(triton.cdiv(n_rows, BLOCK_M),)](
            bits, ids, n_rows, N_WORDS=n_words, TOPK_=k, BLOCK_M=BLOCK_M,
            BLOCK_K=triton.next_power_of_2(k))
        mask = Bitmatrix(bits, dtype=BIT, shape=[n_rows, n_expts], shape_max=[n_rows, None])
        sparse = SparseMatrix(indx=ids, vals=vals, mask=mask)
        dispatch_indx = sparse.mask_metadata.row_sorted_indx
        combine_indx = sparse.mask_metadata.col_sorted_indx
        ragged = make_ragged_tensor_metadata(sparse.mask_metadata.col_sum, dispatch_indx.shape[0])
        gate_scal = sparse.vals.flatten()[combine_indx]
        rdata = RoutingData(gate_scal, ragged.slice_sizes, n_expts, k, ragged)
        return rdata, GatherIndx(combine_indx, dispatch_indx), ScatterIndx(dispatch_indx, combine_indx)

    def make_inputs(m):
        g = torch.Generator(device=dev)
        g.manual_seed(SEED + m)
        x = torch.randn((m, K), device=dev, generator=g).to(torch.bfloat16)
        ids = torch.rand((m, E), device=dev, generator=g).argsort(dim=1)[:, :TOPK].contiguous()
        wts = torch.softmax(torch.randn((m, TOPK), device=dev, generator=g), dim=-1).to(torch.bfloat16)
        return x, ids, wts

    def moe_reference(x, ids, wts):
        xf = x.float()
        y = torch.zeros((x.shape[0], K), dtype=torch.float32, device=dev)
        for e in range(E):
            tok, slot = (ids == e).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            h = xf[tok] @ w1_ref[e].float().t()              # [n, 2N]
            if b1 is not None:
                h = h + b1[e]
            gate = h[:, 0::2].clamp(max=SWIGLU_LIMIT)
            lin = h[:, 1::2].clamp(min=-SWIGLU_LIMIT, max=SWIGLU_LIMIT)
            a = gate * torch.sigmoid(SWIGLU_ALPHA * gate) * (lin + 1.0)
            o = a @ w2_ref[e].float().t()                      # [n, K]
            if b2 is not None:
                o = o + b2[e]
            y.index_add_(0, tok, o * wts[tok, slot].float().unsqueeze(1))
        return y

    # ---------------------------------------------------------------- timing utils
    drv = triton.runtime.driver.active
    flush_buf = drv.get_empty_cache_for_benchmark()

    def bench(fn):
        return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))

    def graph_bench(fn, n_rep=None):
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
        g.replay()
        torch.cuda.synchronize()
        # calibrate the number of replays to ~100 ms
        st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        st.record()
        for _ in range(5):
            g.replay()
        en.record()
        torch.cuda.synchronize()
        est = max(st.elapsed_time(en) / 5, 1e-3)
        n = n_rep or int(min(2000, max(20, 100.0 / est)))
        return flushed_replays(g, n), g

    def flushed_replays(g, n):
        """The median of n replays of a captured graph, each after the L2 flush."""
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for i in range(n):
            drv.clear_cache(flush_buf)
            starts[i].record()
            g.replay()
            ends[i].record()
        torch.cuda.synchronize()
        times = sorted(a.elapsed_time(b) for a, b in zip(starts, ends))
        return float(times[len(times) // 2])

    # record the opt flags matmul_ogs picks (host-side wrapper, only around one eager call)
    orig_make_opt_flags = tk_matmul_mod.make_opt_flags
    seen_flags = []

    def recording_make_opt_flags(*a, **kw):
        f = orig_make_opt_flags(*a, **kw)
        seen_flags.append({"block_m": f.block_m, "block_n": f.block_n, "block_k": f.block_k,
                           "num_warps": f.num_warps, "num_stages": f.num_stages, "split_k": f.split_k,
                           "is_persistent": f.is_persistent})
        return f

    def sustain(g, n):
        """n replays of a captured graph, each after the L2 flush, as graph_bench times them:
        the median and the wall-clock window they ran in (for power sampling)."""
        torch.cuda.synchronize()
        t0 = time.time()
        ms = flushed_replays(g, n)
        return ms, [t0, time.time()]

    def graph_hot(g, n=200):
        """Back-to-back replays of an already captured graph, no L2 flush (weights stay L2-cold
        anyway: 28 experts x 16.5 MB >> 60 MB L2)."""
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for i in range(n):
            starts[i].record()
            g.replay()
            ends[i].record()
        torch.cuda.synchronize()
        times = sorted(a.elapsed_time(b) for a, b in zip(starts, ends))
        return float(times[len(times) // 2])

    def run_m(m, w1t, w2t, p1, p2, row, full=True):
        """Measure one token count into `row` (already listed in RESULT, so partial results are saved)."""
        t_m = time.time()
        try:
            x, ids, wts = make_inputs(m)
            inter = torch.empty((1, m * TOPK, N), dtype=torch.bfloat16, device=dev)
            out = torch.empty((1, m, K), dtype=torch.bfloat16, device=dev)

            def fc1_fc2(rdata, gidx, sidx):
                # = vLLM triton_kernel_fused_experts (apply_router_weight_on_input=False)
                matmul_ogs(x, w1t, b1, rdata, gather_indx=gidx, precision_config=p1,
                           fused_activation=act, y=inter)
                matmul_ogs(inter.view(m * TOPK, N), w2t, b2, rdata, scatter_indx=sidx,
                           precision_config=p2, gammas=rdata.gate_scal, y=out)
                return out

            def layer():
                # = vLLM OAITritonExperts.apply: routing metadata from topk ids/weights, then the GEMMs
                rdata, gidx, sidx = make_routing(ids, wts, E)
                return fc1_fc2(rdata, gidx, sidx)

            # first (eager) call: compiles the kernels for this shape class
            t = time.time()
            tk_matmul_mod.make_opt_flags = recording_make_opt_flags
            seen_flags.clear()
            try:
                y = layer()
            finally:
                tk_matmul_mod.make_opt_flags = orig_make_opt_flags
            torch.cuda.synchronize()
            row["first_call_s"] = round(time.time() - t, 2)
            if len(seen_flags) >= 2:
                row["opt_flags_fc1"], row["opt_flags_fc2"] = seen_flags[0], seen_flags[1]
            y_eager = y.view(m, K).clone()
            if not torch.isfinite(y_eager.float()).all():
                note("M=%d: non-finite values in the output" % m)
            if m in CHECK_M:
                ref = moe_reference(x, ids, wts)
                row["rel_err"] = float((y_eager.float() - ref).norm() / ref.norm().clamp_min(1e-30))
                del ref
            log("M=%5d first call %.2fs%s | fc1 %s | fc2 %s" % (
                m, row["first_call_s"],
                "" if row["rel_err"] is None else " | rel_err %.3e" % row["rel_err"],
                row.get("opt_flags_fc1"), row.get("opt_flags_fc2")))
            write_json()

            if full:
                row["median_ms"] = bench(layer)
                log("M=%5d do_bench layer %.4f ms" % (m, row["median_ms"]))
                write_json()

            if time_left() > 8:
                try:
                    gms, g = graph_bench(layer)
                    row["graph_ms"] = gms
                    torch.cuda.synchronize()
                    row["graph_matches_eager"] = bool(torch.equal(out.view(m, K), y_eager))
                    row["graph_ms_hot"] = graph_hot(g)
                    log("M=%5d graph layer %.4f ms (hot L2 %.4f ms; output == eager: %s)" % (
                        m, gms, row["graph_ms_hot"], row["graph_matches_eager"]))
                    if SUSTAIN_ROUNDS > 0:
                        row["sustained_ms"], row["sustained_window"] = sustain(g, SUSTAIN_ROUNDS)
                        log("M=%5d sustained: %d replays, median %.4f ms" % (m, SUSTAIN_ROUNDS, row["sustained_ms"]))
                    del g
                except Exception as ex:  # graph capture may fail; report and go on
                    row["graph_error"] = "%s: %s" % (type(ex).__name__, str(ex)[:300])
                    log("M=%5d graph capture failed: %s" % (m, row["graph_error"]))
                    torch.cuda.synchronize()
                write_json()

            if full and time_left() > 8:
                rd, gi, si = make_routing(ids, wts, E)
                row["median_ms_gemms"] = bench(lambda: fc1_fc2(rd, gi, si))
                try:
                    row["graph_ms_gemms"], g = graph_bench(lambda: fc1_fc2(rd, gi, si))
                    del g
                except Exception as ex:
                    row["graph_gemms_error"] = "%s: %s" % (type(ex).__name__, str(ex)[:300])
                log("M=%5d gemms only: do_bench %.4f ms, graph %s ms" % (
                    m, row["median_ms_gemms"], row.get("graph_ms_gemms")))
            t_ms = row["graph_ms"] or row["median_ms"]
            if t_ms:
                flops = 2.0 * m * TOPK * (K * 2 * N + N * K)
                row["tflops_layer"] = round(flops / (t_ms * 1e-3) / 1e12, 2)
        except Exception as ex:
            row["error"] = "%s: %s" % (type(ex).__name__, str(ex)[:500])
            log("M=%d FAILED: %s\n%s" % (m, row["error"], traceback.format_exc()))
            torch.cuda.synchronize()  # raises if the context is gone
        row["wall_s"] = round(time.time() - t_m, 1)
        return row

    # ---------------------------------------------------------------- main loop
    log("setup done; M list", M_LIST, "| checked M", sorted(CHECK_M), "| budget %.0fs" % BUDGET_S)
    write_json()
    for m in M_LIST:
        if time_left() < 20:
            RESULT["stopped_early"] = True
            note("budget: stopped before M=%d (%.0fs left)" % (m, time_left()))
            break
        row = {"m": m, "median_ms": None, "graph_ms": None, "rel_err": None}
        RESULT["rows"].append(row)
        run_m(m, w1_tk, w2_tk, pc1, pc2, row, full=True)
        write_json()

    # ------------------------------------- optional: triton_kernels' own small-batch choice
    # bench/bench_mlp.py at v3.6.0 swizzles the scales with num_warps=4 when the batch is
    # <= 512 tokens (vLLM always uses 8). Graph timings only; the main rows stay vLLM's config.
    if ALT_NUM_WARPS and ALT_NUM_WARPS != NUM_WARPS_SWIZZLE and not RESULT["stopped_early"] and time_left() > 40:
        try:
            del w1_tk, w2_tk, pc1, pc2
            torch.cuda.empty_cache()
            w1a, _, w1a_s, _, _ = swizzle_mxfp4(w1_q, w1_s, ALT_NUM_WARPS)
            w2a, _, w2a_s, _, _ = swizzle_mxfp4(w2_q, w2_s, ALT_NUM_WARPS)
            p1a = PrecisionConfig(weight_scale=w1a_s, flex_ctx=FlexCtx(rhs_data=InFlexData()))
            p2a = PrecisionConfig(weight_scale=w2a_s, flex_ctx=FlexCtx(rhs_data=InFlexData()))
            key = "rows_scale_num_warps_%d" % ALT_NUM_WARPS
            RESULT[key] = []
            log("alternative config: scale swizzle num_warps=%d (triton_kernels bench_mlp choice for <=512 tokens)"
                % ALT_NUM_WARPS)
            for m in [mm for mm in M_LIST if mm <= 512]:
                if time_left() < 20:
                    note("budget: alternative config stopped before M=%d" % m)
                    break
                row = {"m": m, "median_ms": None, "graph_ms": None, "rel_err": None}
                RESULT[key].append(row)
                run_m(m, w1a, w2a, p1a, p2a, row, full=False)
                write_json()
        except Exception as ex:
            note("alternative config failed: %s: %s" % (type(ex).__name__, str(ex)[:300]))

    # summary table
    log("")
    log("%6s %12s %10s %12s %12s %10s" % ("M", "do_bench_ms", "graph_ms", "gemms_bench", "gemms_graph", "rel_err"))
    for r in RESULT["rows"]:
        f = lambda v, p: ("%.*f" % (p, v)) if isinstance(v, float) else "-"
        log("%6d %12s %10s %12s %12s %10s" % (
            r["m"], f(r["median_ms"], 4), f(r["graph_ms"], 4), f(r.get("median_ms_gemms"), 4),
            f(r.get("graph_ms_gemms"), 4), ("%.2e" % r["rel_err"]) if r["rel_err"] is not None else "-"))
    for key in [k for k in RESULT if k.startswith("rows_scale_num_warps_")]:
        log("")
        log("%s (graph_ms only):" % key)
        for r in RESULT[key]:
            log("%6d graph %s ms  rel_err %s" % (r["m"], "%.4f" % r["graph_ms"] if r["graph_ms"] else "-",
                                                  "%.2e" % r["rel_err"] if r["rel_err"] is not None else "-"))


if __name__ == "__main__":
    try:
        main()
    except Exception as ex:
        RESULT["notes"].append("fatal: %s: %s" % (type(ex).__name__, str(ex)[:500]))
        log("FATAL:", traceback.format_exc())
    finally:
        write_json()
        log("wrote", JSON_PATH)
        _LOG.close()
