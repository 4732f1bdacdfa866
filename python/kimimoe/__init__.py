"""Check a PyTorch MoE kernel against kimimoe's exact oracle.

    import kimimoe
    kimimoe.dump_case("case.safetensors", x=x, topk_ids=ids, topk_weights=wts,
                      w31=w13, w31_scale=w13_scale, w2=w2, w2_scale=w2_scale,
                      activation="situ", fc1_layout="gate_up", chain="flashinfer")
    kimimoe.assert_moe_close(out, "case.safetensors")

assert_moe_close takes a torch tensor, a numpy array or a file; it writes
the candidate, runs `kimimoe check` (the command
from kimimoe=PATH, $KIMIMOE or PATH) and raises AssertionError carrying the
report and the diagnosis when the output is wrong; it returns the JSON
report when it is right. CheckError means the check could not be made (a
bad case, a wrong shape).

dump_case's arguments (torch tensors on any device, copied to the CPU, or
numpy arrays, with no torch needed):
  x             [M, K] float32/bfloat16/float16 (or x_q [M, K] uint8 E4M3 codes
                / float8_e4m3fn with x_scale [M, K/32] uint8 E8M0)
  topk_ids      [M, topk] int32/int64 global expert ids (-1 masks a slot)
  topk_weights  [M, topk] float
  w31, w2       packed MXFP4 uint8: w31 [E, 2N, K/2], w2 [E, K, N/2]
                (element 2j in the low nibble)
  w31_scale, w2_scale  uint8 E8M0: [E, 2N, K/32] and [E, K, N/32] linear,
                or FlashInfer's 128x4 swizzled layout (scale_layout="swizzled",
                one swizzled block per expert, flattened)
  fc1_layout    "up_gate" (FlashInfer's w31: rows [up; gate]), "gate_up"
                (a checkpoint's [w1; w3] = [gate; up], SGLang's w13), or
                "interleaved" (GPT-OSS: gate even rows, up odd rows)
  w31_bias [E, 2N], w2_bias [E, K]   optional, rows in fc1_layout's order
  router_logits [M, E_global], correction_bias [E_global]   optional: kept
                for the diagnosis (and checked against topk_ids)
  activation, chain ("mxfp8"; "flashinfer"; "bf16" for triton_kernels'
  matmul_ogs, "marlin" for Marlin's unfused W4A16 flow), recipe ("rceil"), ep_size, ep_rank, and the
  activation parameters (situ_beta, situ_linear_beta, swiglu_alpha,
  swiglu_beta, swiglu_limit), written to the file's metadata.

reference(case) returns the oracle's output as a torch tensor or a numpy
array, for your own comparison.

The case format and its rules are kimimoe's docs/CONTRACT.md. Only the
torch functions need torch; the rest is the standard library.
"""
import os

from . import _numpy, _safetensors
from ._check import DEFAULT_TIMEOUT_S, CheckError, assert_close_file, find_kimimoe, run_check, run_command, with_candidate_file

__all__ = ["dump_case", "assert_moe_close", "reference", "run_check", "CheckError", "find_kimimoe"]


def dump_case(path, **kw):
    """Write a case file from torch tensors or numpy arrays (the module doc
    lists the arguments). With any torch tensor among them the torch writer
    runs (numpy arrays are taken as tensors); with numpy arrays alone the
    numpy writer does, torch or no torch. Both write the same bytes."""
    if not any(_numpy.is_array(v) for v in kw.values()) or any(type(v).__module__.startswith("torch") for v in kw.values()):
        from ._torch import dump_case as _dump
        arrays = [k for k, v in kw.items() if _numpy.is_array(v)]
        if arrays:
            import torch
            kw = {k: torch.from_numpy(v) if k in arrays else v for k, v in kw.items()}
        return _dump(path, **kw)
    return _numpy.dump_case(path, **kw)


def assert_moe_close(out, case_path, *, kimimoe=None, tensor="out", args=(), timeout=DEFAULT_TIMEOUT_S):
    """Check out (a torch tensor [M, K], or the path of a safetensors file
    holding it as `tensor`) against the oracle on case_path.

    Returns kimimoe's JSON report on a pass. Raises AssertionError with the
    text report (metrics, worst rows, most likely mistake, every hypothesis)
    on a fail, CheckError if the check could not be made. args are extra
    `kimimoe check` flags, e.g. ("--chain", "flashinfer"). timeout bounds
    the check in seconds (default DEFAULT_TIMEOUT_S; None: no limit)."""
    kw = dict(kimimoe=kimimoe, tensor=tensor, args=args, timeout=timeout)
    if isinstance(out, (str, bytes, os.PathLike)):
        return assert_close_file(out, case_path, **kw)
    if _numpy.is_array(out):
        write_candidate = _numpy.write_candidate
    else:
        from ._torch import write_candidate
    return with_candidate_file(lambda p: write_candidate(p, out, tensor), lambda p: assert_close_file(p, case_path, **kw))


def reference(case_path, *, kimimoe=None, framework="auto", timeout=DEFAULT_TIMEOUT_S):
    """The oracle's output [M, K] for a case file, in float32, for your own
    comparison (torch.testing.assert_close, numpy.testing): `kimimoe run
    --backend go` on the case. framework "torch" gives a torch tensor,
    "numpy" a numpy array, "auto" a torch tensor where torch imports, else
    a numpy array. CheckError if the run fails or passes timeout seconds."""
    import shutil
    import tempfile
    if framework not in ("auto", "torch", "numpy"):
        raise ValueError("framework must be auto, torch or numpy, not %r" % (framework,))
    d = tempfile.mkdtemp(prefix="kimimoe-")
    try:
        out = os.path.join(d, "ref.safetensors")
        run_command([find_kimimoe(kimimoe), "run", "--backend", "go", "--case", os.fsdecode(case_path), "--out", out], timeout)
        ts, _ = _safetensors.read(out)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    _, shape, raw = ts["out"]  # run writes F32 by default
    if framework != "numpy":
        try:
            import torch
            return torch.frombuffer(bytearray(raw), dtype=torch.float32).reshape(shape)
        except ImportError:
            if framework == "torch":
                raise
    import numpy as np
    return np.frombuffer(raw, dtype="<f4").reshape(shape).astype(np.float32)
