# Question: how accurate are FP8 tensor-core GEMMs that keep MXFP8's scales, promoted every 32 k or re-expressed exactly at a scale every 128 k?
# The `fast` precision's candidates for GEMM1 (x MXFP8 x w MXFP4, float32
# out), each against the exact sum (float64 of the dequantized values):
#   fp32     the exact path's arithmetic: exact products, a float32 sum
#            (torch's float32 matmul, TF32 off)
#   fp8/32   an FP8 GEMM a 32-k block (torch._scaled_mm, E4M3 operands,
#            float32 out, fast accumulation), each block's result times its
#            two E8M0 scales added in float32: a promotion every wgmma
#   fp8/128  each token's four block scales of a 128-k group replaced by
#            their largest, the codes shifted down to match (the same real
#            numbers where E4M3 holds them: exact), the weights likewise a
#            row; one FP8 GEMM a group, promoted once: DeepGEMM's loop
#   exact128 the share of (token, group) pairs whose shift is exact, i.e.
#            where fp8/128 computes MXFP8's own values (elsewhere the
#            shifted code is rounded, which the `fast` contract forbids
#            without a fallback)
# x is drawn N(0, 1), and again with outlier channels (every 64th feature
# times 30, as LLM activations have), quantized to MXFP8 (rceil); w is
# drawn N(0, 1) a row and quantized to MXFP4 (E8M0 floor(log2 amax) - 2,
# nearest E2M1). Run on the GPU machine:
#   python3 bench/probes/fp8_group_numerics.py [M K N]
# Output: per x distribution, the NRMSE of each candidate and exact128.
import sys
import torch

E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
F8 = torch.float8_e4m3fn

def mxfp8(x):
    """x (M, K) float32 -> (E4M3 values as float32, block exponents (M, K/32)): rceil scales."""
    b = x.view(x.shape[0], -1, 32)
    amax = b.abs().amax(-1).clamp_min(2.0 ** -126)
    s = torch.ceil(torch.log2(amax / 448.0))
    q = (b / torch.exp2(s)[..., None]).to(F8).float()
    return q.view_as(x), s

def mxfp4(w):
    """w (N, K) -> (E2M1 values as float32, block exponents (N, K/32))."""
    b = w.view(w.shape[0], -1, 32)
    amax = b.abs().amax(-1).clamp_min(2.0 ** -126)
    s = torch.floor(torch.log2(amax)) - 2
    v = (b / torch.exp2(s)[..., None]).clamp(-6, 6)
    grid = E2M1.to(w.device)
    idx = (v.abs()[..., None] - grid).abs().argmin(-1)
    q = grid[idx] * torch.sign(v)
    return q.view_as(w), s

def expand(s, k):
    return torch.repeat_interleave(s, k, dim=1)

def fp8_mm(a, b):
    """a (M, k), b (N, k), float32 values E4M3 holds -> a @ b.T on the FP8 tensor cores, float32."""
    one = torch.ones((), device=a.device)
    return torch._scaled_mm(a.to(F8), b.to(F8).t(), scale_a=one, scale_b=one, out_dtype=torch.float32, use_fast_accum=True)

def nrmse(a, ref):
    return ((a.double() - ref).norm() / ref.norm()).item()

def run(name, x, w):
    xq, sx = mxfp8(x)
    wq, sw = mxfp4(w)
    K = x.shape[1]
    xv, wv = xq * torch.exp2(expand(sx, 32)), wq * torch.exp2(expand(sw, 32))
    exact = xv.double() @ wv.double().t()
    torch.backends.cuda.matmul.allow_tf32 = False
    fp32 = xv @ wv.t()
    acc32 = torch.zeros_like(fp32)
    for b in range(K // 32):
        ks = slice(32 * b, 32 * b + 32)
        acc32 += fp8_mm(xq[:, ks], wq[:, ks]) * torch.exp2(sx[:, b])[:, None] * torch.exp2(sw[:, b])[None, :]
    acc128 = torch.zeros_like(fp32)
    exact_pairs, pairs = 0, 0
    for g in range(K // 128):
        ks = slice(128 * g, 128 * g + 128)
        rx = sx[:, 4 * g:4 * g + 4].amax(1)
        rw = sw[:, 4 * g:4 * g + 4].amax(1)
        xs = xq[:, ks] * torch.exp2(expand(sx[:, 4 * g:4 * g + 4] - rx[:, None], 32))
        ws = wq[:, ks] * torch.exp2(expand(sw[:, 4 * g:4 * g + 4] - rw[:, None], 32))
        ok = (xs.to(F8).float() == xs).all(1)
        exact_pairs += ok.sum().item()
        pairs += ok.numel()
        assert (ws.to(F8).float() == ws).all(), "E2M1 shifted within E4M3's range"
        acc128 += fp8_mm(xs, ws) * torch.exp2(rx)[:, None] * torch.exp2(rw)[None, :]
    print(f"{name:>9}: fp32 {nrmse(fp32, exact):.2e}  fp8/32 {nrmse(acc32, exact):.2e}  "
          f"fp8/128 {nrmse(acc128, exact):.2e}  exact128 {100 * exact_pairs / pairs:.2f}% of (token, group)", flush=True)

def main():
    M, K, N = (int(v) for v in sys.argv[1:4]) if len(sys.argv) > 3 else (256, 3584, 1024)
    torch.manual_seed(0)
    dev = "cuda"
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}; GEMM1-like M={M} K={K} N={N}; NRMSE against the float64 sum")
    w = torch.randn(N, K, device=dev)
    x = torch.randn(M, K, device=dev)
    run("N(0,1)", x, w)
    xo = x.clone()
    xo[:, ::64] *= 30
    run("outliers", xo, w)

if __name__ == "__main__":
    main()
