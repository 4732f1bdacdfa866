# Question: does an FP8 (or BF16) wgmma return a 32-product block sum exactly? (No for FP8: about 14 bits kept, truncated.)
# What the H200's tensor cores do when they sum a block of products: the
# question behind issue 11's FP8 scheme (each weight row's MXFP4 scale
# folded into an E4M3 operand, one FP8 wgmma a 32-block, its float32
# partial promoted once): that scheme is exact only if the tensor core
# returns the 32-product sum exactly. It measures, for FP8 (E4M3 x E4M3,
# float32 out) and for BF16 (BF16 x BF16, float32 out, the wgmma-fp4
# path's MMA):
#   1. two products, 2^16 and +-m 2^(16-s) (m = 1, 1.5, 1.875): up to
#      which spread s the sum is exact, and whether the lost bits are
#      truncated (toward zero) or rounded;
#   2. 2^16 and 31 products of 2^(16-s): whether the small ones are cut one by
#      one (each aligned to the largest) or summed first; 2b. whether the
#      window follows the largest product or the sum;
#   3. MXFP8 x MXFP4 blocks as the layer has them (x: normal samples
#      quantized to MXFP8 with the OCP scale rule, E4M3 codes of one
#      block; w: E2M1 values, uniform codes), 32 products a sum: how many
#      sums are exact, and the worst error in units of the float32 ulp of
#      the exact sum;
#   4. from the window parts 1 and 2b find, how many FP8 MMAs a block of
#      those x would need if x were split by exponent into bands that each
#      fit it (the exact FP8 scheme's cost), a token at a time and for a
#      48-token tile, and the band sums checked on the tensor cores;
#   5. the same for int8 MMAs (exact int32 sums), whose bands span four
#      binades of x.
# Each sum is one MMA of K = 32 (FP8: one wgmma k32; BF16: two wgmma k16,
# the second adding to the first's accumulator, as the path's loop does),
# computed three ways: a Triton kernel (tl.dot, one warpgroup: its PTX is
# checked for wgmma), torch._scaled_mm (cuBLAS, FP8 only, fast
# accumulation off and on), and exactly in float64 (every product and sum
# here is exact in float64: at most 8 significant bits a product, 40 bits
# of span). Run on the GPU machine (torch, triton):
#   python3 bench/probes/accum_probe.py [ROUNDS]   (64: part 3's 64 x 64 x 64 sums)
# Its output on the H200 (docs/PERF.md summarizes it), read
# in docs/PERF.md ("What the tensor cores keep of a block's sum").
import sys, torch, triton, triton.language as tl

dev = torch.device("cuda")
E4M3 = torch.float8_e4m3fn
WAYS = ["fp8 triton", "fp8 cublas", "fp8 cublas fast", "bf16 triton"]


@triton.jit
def dot_kernel(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
    m = tl.arange(0, 64)
    k = tl.arange(0, 32)
    n = tl.arange(0, N)
    a = tl.load(a_ptr + m[:, None] * 32 + k[None, :])
    b = tl.load(b_ptr + k[:, None] * N + n[None, :])
    c = tl.dot(a, b, out_dtype=tl.float32)
    tl.store(c_ptr + m[:, None] * N + n[None, :], c)


def floor_log2(v):
    """floor(log2 v) for v > 0, exactly (frexp: no rounding; the device's
    log2 can land just below an exact power of two)."""
    return (torch.frexp(v)[1] - 1).to(v.dtype)


def triton_dot(a, b):
    """a [64, 32], b [32, N] (both E4M3 or both BF16): the float32 product."""
    c = torch.empty(64, b.shape[1], dtype=torch.float32, device=dev)
    dot_kernel[(1,)](a.contiguous(), b.contiguous(), c, N=b.shape[1], num_warps=4)
    return c


def wgmma_in_ptx(dtype):
    a = torch.zeros(64, 32, device=dev).to(dtype)
    b = torch.zeros(32, 64, device=dev).to(dtype)
    c = torch.empty(64, 64, dtype=torch.float32, device=dev)
    h = dot_kernel[(1,)](a, b, c, N=64, num_warps=4)
    ptx = h.asm["ptx"]
    return sorted({l.split()[0] for l in ptx.splitlines() if "wgmma.mma_async" in l})


def scaled_mm(a, b, fast):
    one = torch.ones((), device=dev)
    return torch._scaled_mm(a, b.t().contiguous().t(), scale_a=one, scale_b=one, out_dtype=torch.float32, use_fast_accum=fast)


def ways(a64, b64):
    """a64 [64, 32], b64 [32, N] float64 holding E4M3 values: each way's result, float64."""
    a8, b8 = a64.float().to(E4M3), b64.float().to(E4M3)
    assert torch.equal(a8.double(), a64) and torch.equal(b8.double(), b64), "inputs must be E4M3 values"
    out = {"exact": a64 @ b64}
    out["fp8 triton"] = triton_dot(a8, b8).double()
    out["fp8 cublas"] = scaled_mm(a8, b8, False).double()
    out["fp8 cublas fast"] = scaled_mm(a8, b8, True).double()
    out["bf16 triton"] = triton_dot(a64.to(torch.bfloat16), b64.to(torch.bfloat16)).double()
    return out


def diagonal(cases):
    """cases: up to 64 pairs of 32-vectors; case c sits at row c of A and
    column c of B (the rest zero), so D[c, c] is its sum alone."""
    a = torch.zeros(64, 32, dtype=torch.float64, device=dev)
    b = torch.zeros(32, 64, dtype=torch.float64, device=dev)
    for c, (x, y) in enumerate(cases):
        a[c] = torch.tensor(x, dtype=torch.float64)
        b[:, c] = torch.tensor(y, dtype=torch.float64)
    r = ways(a, b)
    return {w: torch.diagonal(v)[: len(cases)].tolist() for w, v in r.items()}


BIG = 16  # the large product: 2^8 x 2^8, both E4M3 values


def factors(m, e):
    """(m 2^a, 2^b), both E4M3 values, whose product is m 2^e (m with at most
    4 significant bits, e from -15 to 12): a normal (2^-6 .. 2^7), b a power
    of two down to E4M3's smallest subnormal, 2^-9."""
    a = max(-6, min(7, e))
    if e - a > 8:  # only 2^16 itself: 2^8 x 2^8
        a = e - 8
    b = e - a
    assert abs(m) * 2.0**a <= 448, (m, e)
    assert -9 <= b <= 8, e
    return m * 2.0**a, 2.0**b


def sums(cases):
    """cases: lists of (m, e) products of a 32-product sum (the first 2^BIG);
    each way's float64 result, and the exact sum rounded once to float32
    (to nearest, ties to even: what a float32 result can best be)."""
    vec = []
    for prods in cases:
        x, y = zip(*[factors(m, e) for m, e in prods])
        vec.append((list(x) + [0.0] * (32 - len(x)), list(y) + [0.0] * (32 - len(y))))
    r = diagonal(vec)
    r["rn32"] = torch.tensor(r["exact"], dtype=torch.float64).float().double().tolist()
    return r


def two_products():
    print(f"1. two products, 2^{BIG} + p, p = +-m 2^({BIG} - s): the result minus 2^{BIG} in units of 2^({BIG} - s)")
    print(f"   (the exact sum rounded to float32 in the rn32 column; float32 holds it exactly up to s = 23 for m = 1)")
    rows = [(sg, m, s) for sg in (1, -1) for m in (1.0, 1.5, 1.875) for s in range(4, 32)]
    res = {}
    for i in range(0, len(rows), 64):
        r = sums([[(1.0, BIG), (sg * m, BIG - s)] for sg, m, s in rows[i:i + 64]])
        for w, v in r.items():
            res.setdefault(w, []).extend(v)
    cols = ["rn32"] + WAYS
    print(f"{'p':>22} " + " ".join(f"{w:>16}" for w in cols))
    first = {w: {} for w in WAYS}
    for i, (sg, m, s) in enumerate(rows):
        unit = 2.0**(BIG - s)
        print(f"{sg * m:>+7.3f} x 2^({BIG}-{s:<2})     " + " ".join(f"{(res[w][i] - 2.0**BIG) / unit:>16.4f}" for w in cols))
        for w in WAYS:
            if res[w][i] != res["rn32"][i]:
                first[w].setdefault((sg, m), s)
    for w in WAYS:
        print(f"  {w}: first spread s whose result is not the rounded exact sum, by (sign, m): {first[w] or 'none up to 31'}")


def many_small():
    print(f"2. 2^{BIG} and 31 products of 2^({BIG} - s): the result minus 2^{BIG} in units of 2^({BIG} - s) (exact: 31)")
    ss = list(range(4, 32))
    r = sums([[(1.0, BIG)] + [(1.0, BIG - s)] * 31 for s in ss])
    cols = ["rn32"] + WAYS
    print(f"{'s':>4} " + " ".join(f"{w:>16}" for w in cols))
    for i, s in enumerate(ss):
        print(f"{s:>4} " + " ".join(f"{(r[w][i] - 2.0**BIG) * 2.0**(s - BIG):>16.4f}" for w in cols))


def sum_window():
    print(f"2b. 16 products of 2^12 (their sum 2^16) and one of 2^(12 - s): the result minus 2^16 in units of 2^(12 - s)")
    ss = list(range(4, 16))
    r = sums([[(1.0, 12)] * 16 + [(1.0, 12 - s)] for s in ss])
    cols = ["rn32"] + WAYS
    print(f"{'s':>4} " + " ".join(f"{w:>16}" for w in cols))
    for i, s in enumerate(ss):
        print(f"{s:>4} " + " ".join(f"{(r[w][i] - 2.0**16) * 2.0**(s - 12):>16.4f}" for w in cols))


def mx_draw(rounds):
    """The MXFP8 x MXFP4 blocks of parts 3 to 5, drawn in one order from one
    seed, a round at a time: 64 tokens' x blocks (normal samples quantized
    to an MXFP8 block, the scale 2^(floor(log2 amax) - 8), the OCP rule;
    their E4M3 codes, the scale factoring out) and 64 weight rows' blocks
    (E2M1 values, uniform codes), as ([64, 32], [32, 64]) float64 pairs."""
    e2m1 = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=torch.float64, device=dev)
    g = torch.Generator(device=dev).manual_seed(20261201)
    blocks = []
    for _ in range(rounds):
        x = torch.randn(64, 32, generator=g, device=dev, dtype=torch.float64)
        amax = x.abs().amax(dim=1, keepdim=True)
        xq = (x / torch.exp2(floor_log2(amax) - 8)).clamp(-448, 448).float().to(E4M3).double()
        codes = torch.randint(0, 16, (32, 64), generator=g, device=dev)
        blocks.append((xq, e2m1[codes % 8] * (1 - 2 * (codes // 8)).double()))
    return blocks


def mx_blocks(blocks):
    print(f"3. MXFP8 x MXFP4 blocks ({len(blocks)} x 64 x 64 sums of 32 products)")
    stats = {w: [0, 0, 0.0] for w in WAYS}  # sums not the rounded exact one, sums, worst |error| in its ulps
    for xq, w in blocks:
        r = ways(xq, w)
        ex = r["exact"].float().double()  # rounded once to float32: the best a float32 result can be
        ulp = torch.where(ex == 0, torch.full_like(ex, 2.0**-149),
                          torch.exp2(floor_log2(ex.abs()) - 23))
        for way in WAYS:
            d = (r[way] - ex).abs()
            st = stats[way]
            st[0] += int((d != 0).sum())
            st[1] += d.numel()
            st[2] = max(st[2], float((d / ulp).max()))
    for way in WAYS:
        bad, n, worst = stats[way]
        print(f"  {way:>16}: {bad} of {n} sums differ from the exact sum rounded to float32 ({100 * bad / n:.3f}%), worst by {worst:.1f} of its ulps")
    return stats


def bands_needed(xq, spread=1):
    """xq [T, 32] E4M3 values (float64), a token's block a row: the FP8 MMAs
    an exact band split needs for each row. Parts 1 and 2b put the window
    at 13 bits below the leading bit of the largest product or of the sum,
    whichever is larger. A product x w, x = mx 2^ex (mx in [1, 2), its
    lowest bit 2^(ex-3); a subnormal's 2^-9, as for ex = -6) and w an E2M1
    value (magnitude below 2^3, lowest bit 2^-1 or more), is below 2^(ex+4)
    with its lowest bit at 2^(ex-4) or more; 32 of them sum to less than
    2^(ex_max+9), whose window keeps bits from 2^(ex_max-5): a band of x
    exponents with ex_max - ex_min <= 1 keeps every bit of every product
    and of every partial sum inside it (spread 1). Bands taken greedily
    from the top; spread 3 is part 5's int8 bands."""
    nz = xq != 0
    ex = floor_log2(xq.abs().clamp_min(2.0**-6)).clamp_min(-6)
    ex = torch.where(nz, ex, torch.full_like(ex, float("-inf")))
    bands = torch.zeros(xq.shape[0], dtype=torch.int64, device=dev)
    band_of = torch.full(xq.shape, -1, dtype=torch.int64, device=dev)  # each element's band, -1 for zeros
    left = nz.clone()
    while bool(left.any()):
        top = torch.where(left, ex, torch.full_like(ex, float("-inf"))).amax(dim=1, keepdim=True)
        take = left & (ex >= top - spread)
        band_of = torch.where(take, bands[:, None].expand_as(band_of), band_of)
        bands += take.any(dim=1).long()
        left &= ~take
    return bands, band_of


def print_bands(b, tile):
    """The bands each token's block needs (b), and each tile's: its MMA
    serves tile tokens at once, so it needs the most of any of them."""
    hist = torch.bincount(b).tolist()
    print(f"  a token's block: blocks with 0, 1, 2, ... bands {hist} of {b.numel()}, mean {b.double().mean():.3f}")
    t = b[: b.numel() // tile * tile].view(-1, tile).amax(dim=1)
    hist = torch.bincount(t).tolist()
    print(f"  a {tile}-token tile: tiles with 0, 1, 2, ... bands {hist} of {t.numel()}, mean {t.double().mean():.3f}")


def band_counts(blocks, tile, checked):
    print(f"4. the FP8 MMAs an exact band split needs a block ({len(blocks) * 64} tokens' x blocks drawn as in part 3,")
    print(f"   a tile's MMA serves {tile} tokens at once, so it needs the most of any of its tokens)")
    b, _ = bands_needed(torch.cat([xq for xq, _ in blocks]))
    print_bands(b, tile)
    # The rule checked on the tensor cores: each band's 32-product sum (the
    # other bands' x set to zero), against part 3's weights, as one FP8 MMA.
    bad = n = 0
    for xq, w in blocks[:checked]:
        _, band_of = bands_needed(xq)
        for k in range(int(band_of.max()) + 1):
            xb = torch.where(band_of == k, xq, torch.zeros_like(xq))
            got = triton_dot(xb.float().to(E4M3), w.float().to(E4M3)).double()
            bad += int((got != xb @ w).sum())
            n += got.numel()
    print(f"  band sums as one FP8 MMA each (Triton): {bad} of {n} differ from the exact band sum")


def int8_bands(blocks, tile):
    """Part 5: the same split for the integer MMA (wgmma .s8, int32
    accumulators, exact): a band's x as integers x / 2^base, base its
    lowest bit, each at most 127: 4-bit significands (8..15) shifted by at
    most 3, so a band spans four binades of x (ex_max - ex_min <= 3); w as
    the integers 2w (0, 1, 2, 3, 4, 6, 8, 12); 32 products of at most
    15 x 8 x 12 sum far inside int32. The same x blocks as part 4."""
    print(f"5. the int8 MMAs an exact band split needs a block (the x of part 4; four binades a band)")
    xq = torch.cat([xq for xq, _ in blocks])
    b, band_of = bands_needed(xq, 3)
    # each band's integers fit int8: x / 2^(its lowest bit) at most 127
    lsb = torch.where(xq.abs() >= 2.0**-6, torch.exp2(floor_log2(xq.abs().clamp_min(2.0**-6)) - 3),
                      torch.full_like(xq, 2.0**-9))
    worst = 0.0
    for k in range(int(band_of.max()) + 1):
        inb = band_of == k
        if not bool(inb.any()):
            continue
        base = torch.where(inb, lsb, torch.full_like(lsb, float("inf"))).amin(dim=1, keepdim=True)
        ints = torch.where(inb, xq.abs() / base, torch.zeros_like(xq))
        assert bool((ints == ints.round()).all())
        worst = max(worst, float(ints.max()))
    print(f"  the largest band integer: {worst:.0f} (int8 holds 127)")
    print_bands(b, tile)


def main():
    torch.zeros(1, device=dev)
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, triton {triton.__version__}")
    print("Triton's PTX: FP8", wgmma_in_ptx(E4M3), "BF16", wgmma_in_ptx(torch.bfloat16))
    two_products()
    many_small()
    sum_window()
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    blocks = mx_draw(8 * rounds)  # parts 4 and 5 count bands over eight times part 3's blocks, its first ones among them
    mx_blocks(blocks[:rounds])
    band_counts(blocks, 48, rounds)
    int8_bands(blocks, 48)


if __name__ == "__main__":
    main()
