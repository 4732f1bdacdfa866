// Package cuda is the GPU backend: it runs the MoE layer's contract on an
// NVIDIA GPU and registers itself with package backend as "cuda".
//
// Loading. Nothing is loaded at import or init. Open (or backend.Open
// ("cuda")) dlopens libcuda.so.1 and NVRTC and resolves every symbol with
// dlsym into a table; the package never links CUDA, so it builds with gcc
// alone, and without cgo it builds and reports ErrUnavailable. Each library
// is loaded at most once per process, into a table of its own that is
// published only when every symbol resolved, and never unloaded. NVRTC is
// $KIMIMOE_NVRTC if set (and only that), else the first of libnvrtc.so,
// libnvrtc.so.13, libnvrtc.so.12, $CUDA_HOME/lib64/libnvrtc.so; the driver
// is $KIMIMOE_LIBCUDA, else libcuda.so.1. A failed load reports dlopen's
// own message, or the missing symbol. $KIMIMOE_DEVICE picks the device
// ordinal (default 0); a value that is not one is an error. Errors are
// typed and work before loading: errors.Is with ErrUnavailable,
// ErrNoDriver, ErrNoDevice, ErrNoNVRTC, ErrCompile, backend.ErrUnsupported,
// backend.ErrClosed; *CompileError carries the NVRTC log and *Error a
// CUresult.
//
// # The kernel ABI
//
// What Go and the kernels share is defined once, in abi.go: block geometry,
// the activation codes (FlashInfer's numbers, from package activation),
// the packing of activation parameters, recipe and chain codes, the entry
// point names and one argument struct per kernel. abi.go renders it as C
// (macros and structs, each struct's size asserted) that is prepended to
// kernels/moe.cu before NVRTC compiles it; each kernel takes its struct by
// value, and the host launches a kernel only with its own struct type
// (kernel[A]). Tests that need no GPU check that the kernels use only the
// generated macros and that every entry point takes the struct abi.go says.
//
// # Lifecycle
//
// Backend.Close frees every layer still open, then the stream, module and
// context, and returns every error it met; Layer.Close frees the layer's
// memory once. Calls after either Close return errors wrapping
// backend.ErrClosed; a second Close returns nil. All device calls of a
// Backend and its layers are serialized by one lock, so Forward and Close
// may be called concurrently. A layer keeps device buffers (and up to two
// CUDA graphs, one per input form: float x, quantized on the device, or x
// given as MXFP8) per token count, for at most MaxWorkspaces (16) token
// counts; the least
// recently used is freed beyond that.
//
// Kernels. kernels/moe.cu is embedded and compiled by NVRTC for the
// device's architecture on first use, then cached on disk under
// $KIMIMOE_CACHE (default: the user cache directory, kimimoe/cubin) keyed
// by the SHA-256 of source, architecture, options and NVRTC version; each
// entry carries its own hash and a corrupt entry is rebuilt, not trusted.
// KIMIMOE_NVRTC_VERBOSE=1 adds ptxas's -v (registers, spills, and its
// notes on serialized wgmma) to the options and prints the compile log; it
// compiles even on a cache hit, and since -v leaves the cubin as it is,
// it is not part of the key: its cubin serves later runs without it;
// KIMIMOE_NVRTC_DEFINES ("NAME=VALUE ...") adds -D options, for kernel
// variants under measurement; the ABI header's tunables (abiTunable: the
// wgmma-fp4 loops' steps in flight and CTAs an SM, which the host does
// not compute with) yield to them, e.g. KMOE_F4S_BLOCKS_T16=3.
//
// Timing (Layer.TimeForward, kimimoe bench). Each timed forward is
// preceded on the stream by a read of a 256 MB buffer (kmoe_l2_flush;
// the buffer allocated on the first timed forward, freed by Close): the
// forward starts with a cold L2, and the device is busy while the host
// launches it, so the events time the kernels and not the launch latency,
// which a forward inside a model's graph does not pay. It is
// triton.testing.do_bench's method (by which peer_moe.py times the peer)
// with a read for its rewrite, whose dirty lines the forward would write
// back. KIMIMOE_BENCH_FLUSH=write times with the rewrite, =0 with no flush
// (events around the launch on an idle device), to measure the
// differences; another value is an error.
//
// Four paths, chosen per forward by the token count (Layer.PathFor). On an
// sm_90 device (the module is compiled for sm_90a) the wgmma-fp4 path takes
// every M where K and N are multiples of 128 and every weight scale is at
// most 2^1: grouped GEMMs on Hopper's warpgroup MMA with the
// weights kept as MXFP4 in memory (re-laid at Prepare so that each
// thread's A fragment of a 64-k chunk is one 16-byte load and its quad's
// scales of two 128-k steps another, each scale stored once: f4_layout.go),
// widened to BF16 in registers by nine integer instructions a word of
// eight weights (shifts, one rotation, masks) and one BF16 multiply a pair
// by 2^(s-1), which is exact (every E2M1 x 2^(s-127) with s
// <= 128 is a BF16 value, the subnormal at code 0.5 included; checked
// exhaustively on the device), and fed to wgmma as its register-sourced A
// operand with the weights on the 64-row side and 8 to 128 tokens of one
// expert on the narrow side (256 when forced), staged as BF16 in shared memory in the
// 128-byte swizzled form (each row's 16-byte pieces permuted by its place
// in its 8-row group, which spreads a piece of eight rows over all the
// banks; measured 1.4-1.5x faster at M = 128 .. 512 than the unswizzled
// core matrices). BF16 products are exact in float32, so the tensor cores
// sum whole rows in float32 with no per-block scaling. Two warpgroups a CTA (64 rows each:
// GEMM1's up and gate rows of 32 features, so the activation and MXFP8
// requantization are fused in registers as on the mma.sync path), one
// barrier per 128 k. Up to f4FitMaxM (512) tokens the tiles of 32 and 64
// run the wgmma at N = the tile's tokens rounded up to 8 (instances of
// their own: one loop per N in one kernel slowed full tiles), so an
// expert's ~37 tokens at M=128 cost a 40-wide MMA, not a 64-wide one. The
// tiles of 8 and 16 tokens (M <= 36) run the same
// widened fragments through mma.sync m16n8k16 instead, whose per-warp A
// fragment is the wgmma's, with no barrier but one per token window (the
// tokens staged 1024 k at a time at 8 tokens, 256 at 16) and no
// warpgroup-wide wait: measured faster there,
// and bitwise equal to the wgmma loop in the tests. Its GEMMs and the
// finalize are launched with programmatic dependent launch
// (griddepcontrol): GEMM2's CTAs take SMs as GEMM1's last CTAs leave them
// and load their first weights before they wait for GEMM1's intermediate.
// Up to abiRouteCTAMax (1024) routing entries (M x
// top-k, local or not) the BF16 paths (this one and the wgmma path below) route in one CTA of a
// single prologue launch whose other CTAs write x as BF16 (in a CUDA graph
// each launch costs a gap); above it, one launch too (kmoe_route_x_many,
// up to routeManyMaxMDefault tokens; KIMIMOE_ROUTE_MANY_MAX_M moves it):
// a CTA an expert that counts every expert's entries itself and scatters
// its own, a CTA that writes pos = -1 for the entries of other ranks, x as
// BF16 in the rest; with it off, four (a memset, x_bf16, route_count,
// route_scatter). SetFP4MaxM moves its
// threshold (0: off);
// KIMIMOE_FP4_MAX_M sets it for every layer, KIMIMOE_FP4_TOKENS forces a
// token tile, KIMIMOE_FP4_FIT_MAX_M moves the fitted N's threshold (0:
// off), KIMIMOE_FP4_SYNC=0 keeps the small tiles on the wgmma loop,
// KIMIMOE_PDL=0 launches without programmatic dependence and
// KIMIMOE_TILE_READY=0 makes GEMM2 wait for all of GEMM1 (below), all to
// measure (read at Prepare). From M = 2 (f4TileReadyMinM) each GEMM2 CTA
// waits only for the GEMM1 CTAs of its own token tile, which count
// themselves in a per-tile counter (release and acquire at GPU scope;
// the prologue zeroes the counters), so GEMM2's first tiles run in
// GEMM1's last wave; safe from deadlock because GEMM2 is launched only
// once every GEMM1 CTA has started. The 16-token tile skips the MMAs of
// its second 8-token group when the tile holds 8 tokens or fewer. The
// token tile grows with M (f4TileTokens: 8, 16, 32, then 48 from 89 to
// 144 tokens at three CTAs an SM, 64 up to 1024 at two, 128 above at one,
// whose two warpgroups double-buffer their widened A registers so that a
// chunk's wgmmas run while the next chunk is widened: f4PipeMinTokens;
// a 256-token tile, measured slower than 128 at every M, runs only when
// KIMIMOE_FP4_TOKENS=256 forces it). From 89
// to 8192 tokens (f4ActMinMDefault, f4ActMaxMDefault; measured: 4.5% at
// M=128, 4% at 4096 and 8192 since the kernel takes four features a
// lane, 3.5-4% at 89 and 96 on the 48-token tile, slower below on the
// 32-token one) GEMM1 stores its float32 up and gate and
// kmoe_act_requant, launched between the GEMMs, applies the activation
// and the MXFP8 requantization with the same functions in the same order
// as GEMM1's epilogue (the same bits), four 32-feature blocks a warp;
// up to 192 tokens (actByTileMaxMDefault; KIMIMOE_ACT_BY_TILE_MAX_M moves
// it, 0: never) it runs by tile, a CTA a row of a token tile that waits
// for its tile's GEMM1 CTAs' count and adds itself to a second count that
// GEMM2's CTAs of the tile wait for (the same release and acquire, the
// same deadlock argument), so it runs beside GEMM1's last tiles; above,
// over the grid, and GEMM2 waits for all of it. (Above 8192 tokens
// GEMM1's epilogue again: the float32 workspace, 8 bytes a routing entry
// and feature, is 3.2 GB at 8192 with Kimi's top-16.)
// KIMIMOE_FP4_ACT_MIN_M and KIMIMOE_FP4_ACT_MAX_M move that range (MAX 0:
// never), to measure.
//
// The decode path (M <= 24 where the wgmma-fp4 path is not available, and
// every M when K or N is not a multiple of 128, as GPT-OSS's 2880) streams
// the weights: they are re-laid at Prepare into 16-row x 128-k tiles (K and
// N padded with zero weights, which is exact), every SM reads them with
// 16-byte loads, the tokens ride on the MMA's narrow side; one prologue
// launch quantizes x and routes, GEMM1 fuses the activation and
// requantization, GEMM2 and the finalize follow. The grouped path
// quantizes x, routes into a stable expert-sorted permutation, runs
// grouped GEMM1 (activation and requantization fused) and GEMM2 over token
// tiles of 64 or 128 staged in shared memory, and finalizes. On sm_90 from
// M = 192 where the wgmma-fp4 path is not available (or SetFP4MaxM bounds
// it) its GEMMs are the wgmma path's: warpgroup MMA on BF16 operands with
// the weights re-laid at Prepare as BF16 in the operand's 128-byte
// swizzled form, GEMM1 in 128-row tiles (two CTAs an SM, three cp.async
// stages: one CTA's activation epilogue runs beside the other's MMAs),
// GEMM2 in 256-row tiles (128 where K is not a multiple of 256; one CTA an
// SM, four stages), x and the intermediate written as BF16, two
// warpgroups a CTA (SetWGMMA and SetWGMinM turn it off or move its
// threshold; KIMIMOE_WGMMA_MIN_M sets the threshold of every layer,
// KIMIMOE_WGMMA_ROWS="R1,R2" the two GEMMs' tile rows, both to measure).
// KIMIMOE_DECODE_MAX_M sets the decode path's threshold (-1: only where
// the shape needs it).
//
// The two BF16 paths take x as BF16, which holds every MXFP8 value below
// 2^128; a forward whose x reaches 2^128 (an infinite element under the
// rceil recipe, or pre-quantized block scales of 2^120 and up) would turn
// such values into infinities and a product with a zero weight into NaN
// where the exact product is 0, so it runs the mma.sync GEMMs instead,
// decided on the host at upload (one graph per input form and per this).
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
// SwigluStep, GeGLU, GeGLU-tanh) with per-expert parameters, the mxfp8 and
// flashinfer chains, both recipes, K and N any multiples of 32, x as
// float32 or pre-quantized, CUDA Graphs. Anything else fails at Prepare with backend.ErrUnsupported naming
// the "go" backend as the fallback.
//
// Precision against the oracle (same chain): the GEMMs accumulate in
// float32 (mma.sync: exact block products summed across blocks; both
// wgmma paths: whole rows; the oracle: exact block sums, float64 across
// blocks),
// the activation is float32 (on the mxfp8 chain the oracle's is float64),
// and the finalize sums slots in float32. The first two can move an
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
// NCCL is loaded like the driver, at the first group call: $KIMIMOE_LIBNCCL
// if set (and only it), else libnccl.so.2, then libnccl.so; a failure wraps
// ErrNoNCCL with dlopen's message or the missing symbol, and a failed NCCL
// call is an *NCCLError with NCCL's string and the communicator's last
// error. A Group is one MoE layer spread over D devices, and a
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
// (docs/PERF.md). Run to run the group is bitwise deterministic.
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
