#!/usr/bin/env python3
"""Check OpenAI's triton_kernels MXFP4 MoE with kimimoe, as a serving stack would.

The kernel is triton_kernels' matmul_ogs as vLLM runs GPT-OSS on Hopper
(OAITritonExperts): BF16 activations x MXFP4 weights swizzled into the
Hopper layouts, FC1 with its bias and the fused clamped SwiGLU (alpha 1.702,
limit 7), FC2 with its bias, the routing weights and the top-k reduction.
The layer is a small GPT-OSS-style one (8 experts, top-4, K = N = 512,
FC1's rows interleaved gate/up as GPT-OSS stores them).

It writes the layer's case with kimimoe.dump_case (chain "bf16": the
W4A16 chain these kernels compute) and checks triton_kernels' output three
ways:

  right            the case as the kernel holds it (fc1_layout="interleaved"):
                   must pass;
  gate_up_swapped  the [up; gate] halves written as if they were [gate; up]:
                   must fail, the diagnosis naming gate_up_swapped first;
  interleaved      the interleaved rows written as [up; gate] halves (the
                   mistake of a converter that forgets GPT-OSS's layout):
                   must fail, the diagnosis naming gate_up_interleaved first.

usage (a CUDA GPU, torch, triton; the triton_kernels package is not part of
kimimoe: point TRITON_KERNELS_SRC at python/triton_kernels of
triton-lang/triton at the tag matching your triton, e.g. v3.6.0):

    TRITON_KERNELS_SRC=DIR KIMIMOE=path/to/kimimoe python3 python/examples/check_triton_kernels.py OUTDIR

Exit status 0 when all three verdicts are as expected; the cases, the
output and the three JSON reports are left in OUTDIR.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))  # the kimimoe package beside this folder

E, K, N, TOPK, M = 8, 512, 512, 4, 24
ALPHA, LIMIT = 1.702, 7.0
SEED = 4597


def main(out_dir):
    src = os.environ.get("TRITON_KERNELS_SRC")
    if not src or not os.path.isdir(os.path.join(src, "triton_kernels")):
        sys.exit("set TRITON_KERNELS_SRC to the folder holding the triton_kernels package")
    sys.path.insert(0, src)
    import torch
    import triton
    import kimimoe
    from kimimoe._torch import _to_up_gate, write_candidate
    import triton_kernels.swiglu
    from triton_kernels.matmul_ogs import (FlexCtx, FnSpecs, FusedActivation, GatherIndx, PrecisionConfig,
                                           RoutingData, ScatterIndx, matmul_ogs)
    from triton_kernels.numerics import InFlexData
    from triton_kernels.tensor import (BIT, FP4, Bitmatrix, SparseMatrix, convert_layout,
                                       make_ragged_tensor_metadata, wrap_torch_tensor)
    from triton_kernels.tensor_details import layout

    os.makedirs(out_dir, exist_ok=True)
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(SEED)

    def mxfp4(rows, cols, lo, hi):  # codes [E, rows, cols/2] (element 2j low), E8M0 scales [E, rows, cols/32]
        q = torch.randint(0, 256, (E, rows, cols // 2), device=dev, generator=gen, dtype=torch.int16).to(torch.uint8)
        s = torch.randint(lo, hi, (E, rows, cols // 32), device=dev, generator=gen, dtype=torch.int16).to(torch.uint8)
        return q, s

    w1_q, w1_s = mxfp4(2 * N, K, 118, 123)  # FC1 [E, 2N, K], rows gate0, up0, gate1, up1, ...
    w2_q, w2_s = mxfp4(K, N, 118, 123)      # FC2 [E, K, N]
    b1 = torch.randn((E, 2 * N), device=dev, generator=gen) * 0.5  # interleaved as FC1's rows
    b2 = torch.randn((E, K), device=dev, generator=gen) * 0.5
    x = torch.randn((M, K), device=dev, generator=gen).to(torch.bfloat16)
    ids = torch.rand((M, E), device=dev, generator=gen).argsort(dim=1)[:, :TOPK].to(torch.int32).contiguous()
    wts = torch.softmax(torch.randn((M, TOPK), device=dev, generator=gen), dim=-1).to(torch.bfloat16)

    def swizzle(q, s):  # vLLM's _swizzle_mxfp4 for Hopper (num_warps 8)
        vl, vo = layout.make_default_matmul_mxfp4_w_layout(mx_axis=1)
        sl, so = layout.make_default_matmul_mxfp4_w_scale_layout(mx_axis=1, num_warps=8)
        q = convert_layout(wrap_torch_tensor(q.transpose(-2, -1), dtype=FP4), vl, **vo)
        s = convert_layout(wrap_torch_tensor(s.transpose(-2, -1)), sl, **so)
        return q, PrecisionConfig(weight_scale=s, flex_ctx=FlexCtx(rhs_data=InFlexData()))

    w1, pc1 = swizzle(w1_q, w1_s)
    w2, pc2 = swizzle(w2_q, w2_s)
    act = FusedActivation(FnSpecs("swiglu", triton_kernels.swiglu.swiglu_fn, ("alpha", "limit"), reduction_n=2),
                          (ALPHA, LIMIT))

    # Routing metadata from (ids, weights), as vLLM's make_routing_data: a
    # bitmatrix of the chosen experts (distinct a token, so a sum is an OR).
    words = (E + 31) // 32
    bits64 = torch.zeros((M, words), dtype=torch.int64, device=dev)
    bits64.scatter_add_(1, (ids // 32).long(), torch.ones_like(ids, dtype=torch.int64) << (ids % 32).long())
    bits = bits64.to(torch.int32).view(torch.uint32)  # the low 32 bits
    mask = Bitmatrix(bits, dtype=BIT, shape=[M, E], shape_max=[M, None])
    sparse = SparseMatrix(indx=ids.to(torch.int16), vals=wts, mask=mask)
    dispatch, combine = sparse.mask_metadata.row_sorted_indx, sparse.mask_metadata.col_sorted_indx
    ragged = make_ragged_tensor_metadata(sparse.mask_metadata.col_sum, dispatch.shape[0])
    rdata = RoutingData(sparse.vals.flatten()[combine], ragged.slice_sizes, E, TOPK, ragged)

    inter = matmul_ogs(x, w1, b1, rdata, gather_indx=GatherIndx(combine, dispatch), precision_config=pc1,
                       fused_activation=act)
    out = matmul_ogs(inter.view(-1, N), w2, b2, rdata, scatter_indx=ScatterIndx(dispatch, combine), precision_config=pc2,
                     gammas=rdata.gate_scal)
    torch.cuda.synchronize()
    out = out.reshape(M, K)
    print("triton_kernels %s (triton %s) on %s: out %s %s" % (
        getattr(triton_kernels, "__file__", "?"), triton.__version__, torch.cuda.get_device_name(), tuple(out.shape), out.dtype))

    common = dict(x=x, topk_ids=ids, topk_weights=wts, w2=w2_q, w2_scale=w2_s, w2_bias=b2,
                  activation="swiglu_oai", chain="bf16", swiglu_alpha=ALPHA, swiglu_beta=1.0, swiglu_limit=LIMIT)
    halves = lambda t: _to_up_gate(t, "interleaved", N)  # interleaved -> [up; gate], as dump_case converts
    cases = [  # name, FC1 rows, their scales and bias as written, the layout declared, the expected verdict
        ("right", w1_q, w1_s, b1, "interleaved", None),
        ("gate_up_swapped", halves(w1_q), halves(w1_s), halves(b1), "gate_up", "gate_up_swapped"),
        ("interleaved", w1_q, w1_s, b1, "up_gate", "gate_up_interleaved"),
    ]
    cand = os.path.join(out_dir, "tk.out.safetensors")
    write_candidate(cand, out)
    ok = True
    for name, w31, w31s, bias, declared, want in cases:
        path = os.path.join(out_dir, "tk_%s.safetensors" % name)
        kw = dict(common, w31=w31, w31_scale=w31s, w31_bias=bias, fc1_layout=declared)
        kimimoe.dump_case(path, **kw)
        passed, report, text = kimimoe.run_check(path, cand)
        with open(os.path.join(out_dir, "tk_%s.report.json" % name), "w") as f:
            json.dump(report, f, indent=1)
        diag = [h for h in report.get("diagnosis") or [] if not h.get("skipped")]
        first = diag[0]["hypothesis"] if diag else None
        print("%-16s %s  cosine %s  NRMSE %s  most likely: %s" % (
            name, "PASS" if passed else "FAIL", report.get("cosine"), report.get("nrmse"), first))
        if want is None and not passed or want is not None and (passed or first != want):
            print(text)
            ok = False
    print("verdicts as expected" if ok else "a verdict was not as expected")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
