// Package cuda is the GPU backend: it runs the MoE layer's contract on an
// NVIDIA GPU and registers itself with package backend as "cuda". How it
// works inside (the kernel ABI, the launch plan, the paths, one forward,
// expert parallelism, and how to add a path or an architecture) is
// docs/DESIGN.md; the measured errors are docs/VALIDATION.md.
//
// # Loading
//
// Nothing is loaded at import or init. Open (or backend.Open("cuda"))
// dlopens the driver and NVRTC and resolves every symbol; the package never
// links CUDA, so it builds with gcc alone, and without cgo it builds and
// reports ErrUnavailable. Each library is loaded at most once per process.
// The environment is read only for the libraries' paths (KIMIMOE_LIBCUDA,
// KIMIMOE_NVRTC, KIMIMOE_LIBNCCL), the device ordinal (KIMIMOE_DEVICE,
// default 0; a value that is not one is an error) and the compiled-kernel
// cache (KIMIMOE_CACHE, default the user cache directory's kimimoe/cubin;
// a corrupt entry is rebuilt, not trusted). The kernels are compiled by
// NVRTC for the device's architecture on first use: sm_90 (H100, H200),
// sm_89 and sm_120; others are refused with backend.ErrUnsupported.
//
// # Errors
//
// Errors are typed and work before loading: errors.Is with ErrUnavailable,
// ErrNoDriver, ErrNoDevice, ErrNoNVRTC, ErrCompile, ErrNoNCCL,
// ErrTimeout, backend.ErrUnsupported (anything Prepare cannot run, naming
// the "go" backend as the fallback), backend.ErrClosed and moe.ErrInput
// (a bad input, checked before any device work); *CompileError carries
// the NVRTC log, *Error a CUresult, *NCCLError NCCL's message.
//
// # Lifecycle
//
// Backend.Close frees every layer still open, then the stream, module and
// context, and returns every error it met; Layer.Close frees the layer's
// memory once. Calls after either Close return errors wrapping
// backend.ErrClosed; a second Close returns nil. All device calls of a
// Backend and its layers are serialized by one lock, so Forward and Close
// may be called concurrently. Prepare uploads the weights in the form of
// each path that some forward's plan takes (SetTuning uploads and frees
// to match its plans). A layer keeps device buffers and CUDA graphs for
// at most MaxWorkspaces token counts, freeing the least recently used
// beyond that. Each Backend holds its own context, stream
// and buffers, so several devices can be driven by several Backends
// (OpenDevice).
//
// # Capabilities
//
// The activation table's gated kinds, with per-expert parameters (SiTU's
// betas in [2^-12, 2^12]); the mxfp8, flashinfer and bf16 chains (bf16
// only where a wgmma path runs: an sm_90 device); FC biases; both
// recipes; K and N any multiples of 32; x as float32 or pre-quantized;
// CUDA graphs (ForwardGraph); timed forwards (TimeForward: CUDA events
// with L2 flushed before each); a launch policy the caller may override
// for measurement only (Tuning: no setting changes a result bit).
//
// # Determinism and precision
//
// Every path sums a token's slots in slot order with no atomics: results
// are bitwise deterministic run to run, and never read another rank's
// expert or a -1 slot. Against the oracle on the same chain the output
// differs only by float32 accumulation in the GEMMs, the float32
// activation, and the rare MXFP8 rounding boundary those move an
// intermediate across (one E4M3 step for that element); the
// requantization itself is exact. validation.Run's thresholds (cosine at
// least 0.99999, NRMSE at most 1e-3, the same non-finite positions) hold
// with margins docs/VALIDATION.md gives.
//
// # Several GPUs
//
// A Group spreads one layer's local experts over D devices and is a
// backend.Backend itself: OpenGroup drives every device from one process,
// OpenRank is one process a device (the NCCL id through a file or
// NCCL_COMM_ID). Forward is collective. In the replicated mode every
// device gets all tokens and an all-reduce sums the partial outputs; in
// the dispatch mode each token goes, quantized, only to the devices that
// own its experts (so that mode runs no bf16 chain). The output can
// differ from one device's by float32 reassociation of the per-device
// sums; run to run it is bitwise deterministic. GroupOptions.Timeout bounds every wait: a peer that
// never joins or dies gives ErrTimeout (with the errors of the ranks that
// failed), not a hang. kimimoe never asks for NVLink multicast.
package cuda
