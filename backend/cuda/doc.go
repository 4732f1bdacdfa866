// Package cuda is the GPU backend: it runs the MoE layer's contract on an
// NVIDIA GPU and registers itself with package backend as "cuda".
//
// Loading. Nothing is loaded at import or init. Open (or backend.Open
// ("cuda")) dlopens the driver and NVRTC (internal/cu; which file:
// internal/dl) and resolves every symbol into a table; the package never
// links CUDA, so it builds with gcc alone, and without cgo it builds and
// reports ErrUnavailable. Each library is loaded at most once per process
// and never unloaded. The environment is read only for the libraries'
// paths (KIMIMOE_LIBCUDA, KIMIMOE_NVRTC, KIMIMOE_LIBNCCL), the device
// ordinal (KIMIMOE_DEVICE, default 0; a value that is not one is an
// error) and the cubin cache (KIMIMOE_CACHE). Errors are typed and work
// before loading: errors.Is with ErrUnavailable, ErrNoDriver,
// ErrNoDevice, ErrNoNVRTC, ErrCompile, ErrNoNCCL, backend.ErrUnsupported,
// backend.ErrClosed; *CompileError carries the NVRTC log and *Error a
// CUresult.
//
// # The kernel ABI
//
// What Go and the kernels share is defined once, in abi.go: block geometry,
// the activation codes (FlashInfer's numbers, from package activation),
// the packing of activation parameters, recipe and chain codes, the entry
// point names and one argument struct per kernel. abi_gen.go renders it as
// C (macros and structs, each struct's size asserted) that is prepended to
// kernels/ (in kernelOrder) before NVRTC compiles it; each kernel takes
// its struct by value, and the host launches a kernel only with its own
// struct type (kernel[A]). Tests that need no GPU check that the kernels
// use only the generated macros and that every entry point takes the
// struct abi.go says. The wgmma instructions are generated one
// specialization per shape (wgmma_gen.go).
//
// # The launch plan
//
// Which kernels a forward runs is a value: choosePlan (policy.go, which
// holds every threshold) picks a Plan once per (layer, M, whether x has
// MXFP8 values BF16 does not hold) from the shape, what the layer holds on the device and its
// Tuning, and the forward executes it (steps.go and one file a path).
// Layer.PlanFor returns it and Plan.String describes it (kimimoe bench
// prints it). The one override is a Tuning (Layer.SetTuning, WithTuning;
// the command's --tune), to measure what the policy chose between; no
// Tuning changes a result bit.
//
// # Lifecycle
//
// Backend.Close frees every layer still open, then the stream, module and
// context, and returns every error it met; Layer.Close frees the layer's
// memory once. Calls after either Close return errors wrapping
// backend.ErrClosed; a second Close returns nil. All device calls of a
// Backend and its layers are serialized by one lock, so Forward and Close
// may be called concurrently. A layer keeps device buffers (and up to four
// CUDA graphs: one per input form, float x quantized on the device or x
// given as MXFP8, and per whether x's values are all BF16 values) per
// token count, for at most MaxWorkspaces (16) token
// counts; the least
// recently used is freed beyond that.
//
// Modules. The product module (kernelOrder) is compiled by NVRTC for the
// device's architecture on first use and cached on disk (internal/cubin)
// under $KIMIMOE_CACHE (default: the user cache directory, kimimoe/cubin)
// keyed by the SHA-256 of source, architecture, options and NVRTC
// version; each entry carries its own hash and a corrupt entry is rebuilt,
// not trusted. The timing module (kernels/flush.cu) is compiled on the
// first timed forward, the test module (kernels/test.cu) by the tests.
// `go test -run TestPtxasNotes -ptxas -v` prints ptxas's register and
// spill notes for the product module.
//
// Timing (Layer.TimeForward, kimimoe bench). Each timed forward is
// preceded on the stream by a read of a 256 MB buffer (kmoe_l2_flush;
// the buffer allocated on the first timed forward, freed by Close): the
// forward starts with a cold L2, and the device is busy while the host
// launches it, so the events time the kernels and not the launch latency,
// which a forward inside a model's graph does not pay. It is
// triton.testing.do_bench's method with a read for its rewrite, whose
// dirty lines the forward would write back. Tuning.Flush times with the
// rewrite (FlushWrite) or with no flush (FlushNone), to measure the
// differences.
//
// Four paths (Plan.Path). On an sm_90 device (the module is compiled for
// sm_90a) the wgmma-fp4 path takes every M where every weight scale is at
// most 2^1 (K and N not multiples of 128, as GPT-OSS's 2880, run padded
// to them with zero weights, which is exact: f4Dims): grouped GEMMs on Hopper's
// warpgroup MMA with the weights kept as MXFP4 in memory (re-laid at
// Prepare so that each thread's A fragment of a 64-k chunk is one 16-byte
// load and its quad's scales of two 128-k steps another: f4_layout.go),
// widened to BF16 in registers by nine integer instructions a word of
// eight weights and one BF16 multiply a pair by 2^(s-1), which is exact
// (every E2M1 x 2^(s-127) with s <= 128 is a BF16 value, the subnormal at
// code 0.5 included; checked exhaustively on the device), and fed to
// wgmma as its register-sourced A operand with 8 to 128 tokens of one
// expert on the narrow side, staged as BF16 in shared memory in the
// 128-byte swizzled form. BF16 products are exact in float32, so the
// tensor cores sum whole rows in float32 with no per-block scaling. Two
// warpgroups a CTA (GEMM1's up and gate rows of 32 features, so the
// activation and MXFP8 requantization are fused in registers); on the
// 128-token tile, where the activation runs as a kernel of its own,
// GEMM1 takes three (Plan.W3: 96 features a CTA, a third more warps to
// hide the widening's latencies, the same bits), and GEMM2 takes three
// on that tile wherever K / 64 row groups fill CTAs of three to within
// one warpgroup in 50 (Plan.W3Gemm2: 192 output features a CTA). Their
// staged token steps are handed over on mbarriers, a full and an empty one
// a stage, instead of a CTA barrier a step (Plan.Ring), so a warpgroup
// waits for its stage, not for every other warpgroup, and each tile's
// wgmmas run at its tokens rounded up to 16 (Plan.W3Fit: a k loop per N
// in one kernel), so a part-filled tile pays for its tokens only. The
// token tile grows with the tokens an expert gets (f4TileTokens at
// f4EquivM: M for an expert-parallel layer, scaled by top-k over the
// experts for a one-rank layer such as GPT-OSS's); the tiles of 32 to 64
// tokens run the wgmma at N = the tile's tokens rounded up to 8 up to an
// equivalent 512 tokens; the tiles of 8 and 16 tokens run the same widened fragments
// through mma.sync m16n8k16 with no warpgroup-wide wait (bitwise equal to
// the wgmma loop in the tests). Its launches use programmatic dependent
// launch, and from M = 2 each GEMM2 CTA waits only for the GEMM1 CTAs of
// its own token tile, which count themselves in a per-tile counter
// (release and acquire at GPU scope; the prologue zeroes the counters);
// safe from deadlock because GEMM2 is launched only once every GEMM1 CTA
// has started. From 89 to 8192 tokens GEMM1 stores its float32 up and
// gate and kmoe_act_requant, launched between the GEMMs, applies the
// activation and the MXFP8 requantization with the same functions in the
// same order as GEMM1's epilogue (the same bits); up to 192 tokens it
// runs by tile, beside GEMM1's last tiles, with the same counting. The
// BF16 paths route in one prologue launch (one CTA up to abiRouteCTAMax
// entries, a CTA an expert above).
//
// The decode path (M <= 24 where the wgmma-fp4 path is not available, and
// every M when, without it, K or N is not a multiple of 128) streams
// the weights: they are re-laid at Prepare into 16-row x 128-k tiles (K and
// N padded with zero weights, which is exact), every SM reads them with
// 16-byte loads, the tokens ride on the MMA's narrow side; one prologue
// launch quantizes x and routes, GEMM1 fuses the activation and
// requantization, GEMM2 and the finalize follow. The grouped path
// quantizes x, routes into a stable expert-sorted permutation, runs
// grouped GEMM1 (activation and requantization fused) and GEMM2 over token
// tiles of 64 or 128 staged in shared memory, and finalizes. On sm_90 from
// M = 192 where the wgmma-fp4 path is not available (or a Tuning bounds
// it) its GEMMs are the wgmma path's: warpgroup MMA on BF16 operands with
// the weights re-laid at Prepare as BF16 in the operand's 128-byte
// swizzled form, GEMM1 in 128-row tiles (two CTAs an SM, three cp.async
// stages: one CTA's activation epilogue runs beside the other's MMAs),
// GEMM2 in 256-row tiles (128 where K is not a multiple of 256; one CTA an
// SM, four stages), x and the intermediate written as BF16, two
// warpgroups a CTA.
//
// The two BF16 paths take x as BF16, which holds every MXFP8 value from
// block scale 2^-124 to below 2^128. A forward whose x reaches 2^128 (an
// infinite element under the rceil recipe, or pre-quantized block scales
// of 2^120 and up) would turn such values into infinities and a product
// with a zero weight into NaN where the exact product is 0; one with a
// block of scale 2^-125 or below (a nonzero float32 block under 2^-116,
// or pre-quantized codes finer than BF16's 2^-133) would lose their low
// bits. Either runs the mma.sync GEMMs instead, decided on the host at
// upload (xOutsideBF16; one graph per input form and per this).
//
// All paths sum each token's slots in slot order with no atomics (results
// are bitwise deterministic) and never index anything with -1 or another
// rank's id. A prepared layer keeps its weights on the device as given
// (grouped path), re-laid in tiles (decode path), and on sm_90 re-laid for
// the wgmma-fp4 path and as BF16 (wgmma path): 3 x 491 MB + 1.85 GB for
// the 28 experts of a Kimi-K3 EP32 rank.
//
// The block-scaled MMA of the decode and mma.sync grouped GEMMs is one
// device function with two bodies. On sm_89 and sm_90 (the default): FP8 mma.sync m16n8k32 e4m3 x e4m3 with E2M1 widened
// exactly to E4M3, one MMA per 32-block with a zero accumulator, promoted
// to float32 with both scales. On sm_120a: the native mma.sync
// kind::mxf8f6f4.block_scale with ue8m0 scales. The sm_120a body is opt-in
// (CompileFor with ArchSM120a) and has been compiled by NVRTC, never run:
// there was no sm_120 GPU to run it on.
//
// Capabilities: the gated activations (SiTU, SwiGLU, GPT-OSS SwiGLU,
// SwigluStep, GeGLU, GeGLU-tanh) with per-expert parameters (SiTU's betas
// in [2^-12, 2^12], where the constants its kernels read stay normal
// floats), the mxfp8,
// flashinfer and bf16 chains, FC biases, both recipes, K and N any
// multiples of 32, x as float32 or pre-quantized, CUDA Graphs. Anything
// else fails at Prepare with backend.ErrUnsupported naming the "go"
// backend as the fallback.
//
// The bf16 chain (W4A16) runs on the two wgmma paths only, at every M:
// the prologue rounds a float32 x to BF16 (an MXFP8 x is decoded), GEMM1's
// epilogue (or kmoe_act_requant) stores the activation as BF16 with no
// requantization, and the finalize rounds each slot's weighted row to
// BF16 before the float32 sum. Where neither wgmma path is available (no
// sm_90 device, or weight scales past the widening's window with K or N
// not a multiple of 128) Prepare refuses the chain. The FC1 bias is added
// in float32 to GEMM1's accumulator in every epilogue (on the flashinfer
// chain after its BF16 rounding), the FC2 bias to each slot's row in the
// finalize (the slot's expert from its id), on every path.
//
// Precision against the oracle (same chain): the GEMMs accumulate in
// float32 (mma.sync: exact block products summed across blocks; both
// wgmma paths: whole rows; the oracle: exact block sums, float64 across
// blocks),
// the activation is float32 (on the mxfp8 chain the oracle's is float64;
// SiTU's is one quotient, a fitted odd polynomial for tanh near 0 and
// exponentials past it, held by TestSitu within 8 ulps of the float64
// value and to the mean error of a float32 chain of tanhf and expf;
// docs/VALIDATION.md gives the measured errors),
// and the finalize sums slots in float32. The requantization itself is
// exact: the hardware's saturating E4M3 conversion rounds each element,
// after a clamp at E4M3's largest value that also takes NaN there
// (rceil's rule), so for every float32 at every scale it gives the bits
// of the device's integer form of the mxfp package's rounding, which the
// reference vectors check (TestMXFP8ValueExhaustive). The first two can move an
// intermediate value across an MXFP8 rounding boundary, changing that
// element by one E4M3 step; see docs/VALIDATION.md for the measured effect.
//
// Each Backend holds one context (the device's primary context), one
// stream and its own buffers; there is no package-level device state
// beyond the loaded library tables, so several devices can be driven by
// several Backends (OpenDevice opens a given ordinal).
//
// # Several GPUs: expert parallelism through NCCL
//
// NCCL is loaded like the driver, at the first group call (internal/nccl):
// $KIMIMOE_LIBNCCL if set (and only it), else libnccl.so.2, then
// libnccl.so; a failure wraps ErrNoNCCL with dlopen's message or the
// missing symbol, and a failed NCCL call is an *NCCLError with NCCL's
// string and the communicator's last error. A Group is one MoE layer spread over D devices, and a
// backend.Backend: Prepare takes one EP rank's layer (weights and spec, as
// for one device) and gives device i the local experts [i*E/D,
// (i+1)*E/D), which makes it EP rank Rank*D+i of Size*D (moe.SplitDevices;
// E not divisible by D is ErrUnsupported wrapping moe.ErrParallel). Each
// device has its own Backend (context, stream, compiled module), its
// share of the weights in the one-device layout, and an NCCL communicator.
//
// Two modes (Mode). Replicated: every device gets all M tokens and their
// routing, runs its experts (other devices' slots are filtered as another
// rank's), and an all-reduce sums the float32 partial outputs in place.
// Dispatch: token t's home is device floor(t / ceil(M/D)); the home
// quantizes x to MXFP8 (the layer's recipe; the same codes the layer
// would make), sends each token, with its ids and weights, once to every
// device that owns one of its experts (NCCL send/receive in one group,
// after the send counts are all-gathered at upload), the devices run
// their experts on what they received, send each token's partial output
// back, and the home adds them in device order. Forward then all-gathers
// the home rows so that every device holds the whole output.
//
// Sums. One device adds a token's slots in slot order; a group adds each
// device's slots in slot order, then the D partial sums (all-reduce, or
// the home's device-order adds, which for two devices are the same a + b).
// The output can therefore differ from one device's by float32
// reassociation; measured on two H200s, the two modes agree with each
// other bitwise and with one device within cosine 0.999999 and NRMSE 1e-6
// . Run to run the group is bitwise deterministic.
//
// Starting a group: OpenGroup(devices) drives every device from this
// process (ncclCommInitAll, one goroutine per device); OpenRank(id, rank,
// size, device) is one process per device, the unique id made by rank 0
// (NewUniqueID) and passed through a file (WriteUniqueIDFile,
// ReadUniqueIDFile) or derived on every rank from NCCL_COMM_ID. Several
// nodes work the same way (README "Several GPUs"). Forward is collective:
// every rank calls it with the same input. GroupOptions.Timeout bounds the
// setup and every wait: a peer that never joins or dies mid-collective
// gives ErrTimeout and an aborted communicator, not a hang. Collectives
// are launched eagerly (no CUDA graphs). kimimoe never asks for NVLink
// multicast (set NCCL_NVLS_ENABLE=0 where it must stay off).
package cuda
