//go:build cgo

package cu

/*
#cgo LDFLAGS: -ldl
#cgo CFLAGS: -I${SRCDIR}/../dl
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include "dl.h"

typedef int CUresult;
typedef int CUdevice;
typedef void* CUcontext;
typedef void* CUmodule;
typedef void* CUfunction;
typedef void* CUstream;
typedef void* CUevent;
typedef void* CUgraph;
typedef void* CUgraphExec;
typedef unsigned long long CUdeviceptr;
typedef int nvrtcResult;
typedef void* nvrtcProgram;

// The driver and NVRTC entry points kimimoe uses, resolved with dlsym into
// one table per library. Each library is loaded at most once per process
// and never unloaded, so a table, once complete, never changes.
typedef struct {
	void* lib;
	CUresult (*cuInit)(unsigned int);
	CUresult (*cuDeviceGetCount)(int*);
	CUresult (*cuDeviceGet)(CUdevice*, int);
	CUresult (*cuDeviceGetName)(char*, int, CUdevice);
	CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
	CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
	CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
	CUresult (*cuCtxSetCurrent)(CUcontext);
	CUresult (*cuModuleLoadData)(CUmodule*, const void*);
	CUresult (*cuModuleUnload)(CUmodule);
	CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
	CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
	CUresult (*cuFuncGetAttribute)(int*, int, CUfunction);
	CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int*, CUfunction, int, size_t);
	CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
	CUresult (*cuMemFree)(CUdeviceptr);
	CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);
	CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
	CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
	CUresult (*cuMemsetD32Async)(CUdeviceptr, unsigned int, size_t, CUstream);
	CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void**, void**);
	CUresult (*cuStreamCreate)(CUstream*, unsigned int);
	CUresult (*cuStreamDestroy)(CUstream);
	CUresult (*cuStreamSynchronize)(CUstream);
	CUresult (*cuStreamQuery)(CUstream);
	CUresult (*cuEventCreate)(CUevent*, unsigned int);
	CUresult (*cuEventDestroy)(CUevent);
	CUresult (*cuEventRecord)(CUevent, CUstream);
	CUresult (*cuEventSynchronize)(CUevent);
	CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent);
	CUresult (*cuStreamBeginCapture)(CUstream, int);
	CUresult (*cuStreamEndCapture)(CUstream, CUgraph*);
	CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec*, CUgraph, unsigned long long);
	CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
	CUresult (*cuGraphDestroy)(CUgraph);
	CUresult (*cuGraphExecDestroy)(CUgraphExec);
	CUresult (*cuGetErrorName)(CUresult, const char**);
	CUresult (*cuLaunchKernelEx)(const void*, CUfunction, void**, void**); // optional (CUDA 12+): NULL without it
} kmoe_cuda_api;

// cuda.h's CUlaunchAttribute (an id, padding to 8 bytes, a 64-byte value
// union) and CUlaunchConfig, for cuLaunchKernelEx.
typedef struct {
	int id;
	int pad;
	union {
		int i;
		char bytes[64];
	} value;
} kmoe_launch_attr;
typedef struct {
	unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
	CUstream hStream;
	kmoe_launch_attr* attrs;
	unsigned numAttrs;
} kmoe_launch_config;
enum { KMOE_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6 };

typedef struct {
	void* lib;
	nvrtcResult (*nvrtcVersion)(int*, int*);
	nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*);
	nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram, int, const char* const*);
	nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram, size_t*);
	nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram, char*);
	nvrtcResult (*nvrtcGetCUBINSize)(nvrtcProgram, size_t*);
	nvrtcResult (*nvrtcGetCUBIN)(nvrtcProgram, char*);
	nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram*);
} kmoe_nvrtc_api;

static kmoe_cuda_api cu;
static kmoe_nvrtc_api nv;

// Loading fills a local table and publishes it only when complete. On
// failure *why holds dlopen's message, or "missing symbol NAME".
static char kmoe_why[512];

#define SYM(t, field, name) KMOE_DL_SYM(kmoe_why, t, field, name)
// SYM2 takes the versioned name where the library has it, else the plain one.
#define SYM2(t, field, name, fallback) do { *(void**)(&t.field) = dlsym(h, name); \
	if (!t.field) *(void**)(&t.field) = dlsym(h, fallback); \
	if (!t.field) KMOE_DL_MISSING(kmoe_why, name); } while (0)

static const char* kmoe_dlopen_failed(void) { return kmoe_dl_open_failed(kmoe_why, sizeof kmoe_why); }

// kmoe_load_cuda opens the driver and resolves its symbols; NULL on
// success (or if already loaded).
static const char* kmoe_load_cuda(const char* path) {
	if (cu.lib) return NULL;
	void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) return kmoe_dlopen_failed();
	kmoe_cuda_api t = {0};
	SYM(t, cuInit, "cuInit");
	SYM(t, cuDeviceGetCount, "cuDeviceGetCount");
	SYM(t, cuDeviceGet, "cuDeviceGet");
	SYM(t, cuDeviceGetName, "cuDeviceGetName");
	SYM(t, cuDeviceGetAttribute, "cuDeviceGetAttribute");
	SYM(t, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
	SYM2(t, cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease");
	SYM(t, cuCtxSetCurrent, "cuCtxSetCurrent");
	SYM(t, cuModuleLoadData, "cuModuleLoadData");
	SYM(t, cuModuleUnload, "cuModuleUnload");
	SYM(t, cuModuleGetFunction, "cuModuleGetFunction");
	SYM(t, cuFuncSetAttribute, "cuFuncSetAttribute");
	SYM(t, cuFuncGetAttribute, "cuFuncGetAttribute");
	SYM(t, cuOccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
	SYM(t, cuMemAlloc, "cuMemAlloc_v2");
	SYM(t, cuMemFree, "cuMemFree_v2");
	SYM(t, cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
	SYM(t, cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
	SYM(t, cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
	SYM(t, cuMemsetD32Async, "cuMemsetD32Async");
	SYM(t, cuLaunchKernel, "cuLaunchKernel");
	SYM(t, cuStreamCreate, "cuStreamCreate");
	SYM(t, cuStreamDestroy, "cuStreamDestroy_v2");
	SYM(t, cuStreamSynchronize, "cuStreamSynchronize");
	SYM(t, cuStreamQuery, "cuStreamQuery");
	SYM(t, cuEventCreate, "cuEventCreate");
	SYM(t, cuEventDestroy, "cuEventDestroy_v2");
	SYM(t, cuEventRecord, "cuEventRecord");
	SYM(t, cuEventSynchronize, "cuEventSynchronize");
	SYM2(t, cuEventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime");
	SYM2(t, cuStreamBeginCapture, "cuStreamBeginCapture_v2", "cuStreamBeginCapture");
	SYM(t, cuStreamEndCapture, "cuStreamEndCapture");
	SYM(t, cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags");
	SYM(t, cuGraphLaunch, "cuGraphLaunch");
	SYM(t, cuGraphDestroy, "cuGraphDestroy");
	SYM(t, cuGraphExecDestroy, "cuGraphExecDestroy");
	SYM(t, cuGetErrorName, "cuGetErrorName");
	*(void**)(&t.cuLaunchKernelEx) = dlsym(h, "cuLaunchKernelEx");
	t.lib = h;
	cu = t;
	return NULL;
}

static const char* kmoe_load_nvrtc(const char* path) {
	if (nv.lib) return NULL;
	void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) return kmoe_dlopen_failed();
	kmoe_nvrtc_api t = {0};
	SYM(t, nvrtcVersion, "nvrtcVersion");
	SYM(t, nvrtcCreateProgram, "nvrtcCreateProgram");
	SYM(t, nvrtcCompileProgram, "nvrtcCompileProgram");
	SYM(t, nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize");
	SYM(t, nvrtcGetProgramLog, "nvrtcGetProgramLog");
	SYM(t, nvrtcGetCUBINSize, "nvrtcGetCUBINSize");
	SYM(t, nvrtcGetCUBIN, "nvrtcGetCUBIN");
	SYM(t, nvrtcDestroyProgram, "nvrtcDestroyProgram");
	t.lib = h;
	nv = t;
	return NULL;
}

static const char* kmoe_error_name(CUresult r) {
	const char* s = NULL;
	if (cu.cuGetErrorName && cu.cuGetErrorName(r, &s) == 0 && s) return s;
	return "CUDA_ERROR_UNKNOWN";
}

// Thin wrappers: cgo cannot call C function pointers directly.
static CUresult k_cuInit(void) { return cu.cuInit(0); }
static CUresult k_cuDeviceGetCount(int* n) { return cu.cuDeviceGetCount(n); }
static CUresult k_cuDeviceGet(CUdevice* d, int i) { return cu.cuDeviceGet(d, i); }
static CUresult k_cuDeviceGetName(char* s, int n, CUdevice d) { return cu.cuDeviceGetName(s, n, d); }
static CUresult k_cuDeviceGetAttribute(int* v, int a, CUdevice d) { return cu.cuDeviceGetAttribute(v, a, d); }
static CUresult k_cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice d) { return cu.cuDevicePrimaryCtxRetain(c, d); }
static CUresult k_cuDevicePrimaryCtxRelease(CUdevice d) { return cu.cuDevicePrimaryCtxRelease(d); }
static CUresult k_cuCtxSetCurrent(CUcontext c) { return cu.cuCtxSetCurrent(c); }
static CUresult k_cuModuleLoadData(CUmodule* m, const void* img) { return cu.cuModuleLoadData(m, img); }
static CUresult k_cuModuleUnload(CUmodule m) { return cu.cuModuleUnload(m); }
static CUresult k_cuModuleGetFunction(CUfunction* f, CUmodule m, const char* n) { return cu.cuModuleGetFunction(f, m, n); }
static CUresult k_cuFuncSetAttribute(CUfunction f, int attr, int v) { return cu.cuFuncSetAttribute(f, attr, v); }
static CUresult k_cuFuncGetAttribute(int* v, int attr, CUfunction f) { return cu.cuFuncGetAttribute(v, attr, f); }
static CUresult k_cuOccupancy(int* n, CUfunction f, int threads, size_t smem) { return cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(n, f, threads, smem); }
static CUresult k_cuMemAlloc(CUdeviceptr* p, size_t n) { return cu.cuMemAlloc(p, n); }
static CUresult k_cuMemFree(CUdeviceptr p) { return cu.cuMemFree(p); }
static CUresult k_cuMemcpyHtoDAsync(CUdeviceptr d, const void* s, size_t n, CUstream st) { return cu.cuMemcpyHtoDAsync(d, s, n, st); }
static CUresult k_cuMemcpyDtoHAsync(void* d, CUdeviceptr s, size_t n, CUstream st) { return cu.cuMemcpyDtoHAsync(d, s, n, st); }
static CUresult k_cuMemcpyDtoDAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { return cu.cuMemcpyDtoDAsync(d, s, n, st); }
static CUresult k_cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, CUstream st) { return cu.cuMemsetD32Async(d, v, n, st); }
static CUresult k_cuStreamCreate(CUstream* s) { return cu.cuStreamCreate(s, 1); } // non-blocking
static CUresult k_cuStreamDestroy(CUstream s) { return cu.cuStreamDestroy(s); }
static CUresult k_cuStreamSynchronize(CUstream s) { return cu.cuStreamSynchronize(s); }
static CUresult k_cuStreamQuery(CUstream s) { return cu.cuStreamQuery(s); }
static CUresult k_cuEventCreate(CUevent* e) { return cu.cuEventCreate(e, 0); }
static CUresult k_cuEventDestroy(CUevent e) { return cu.cuEventDestroy(e); }
static CUresult k_cuEventRecord(CUevent e, CUstream s) { return cu.cuEventRecord(e, s); }
static CUresult k_cuEventSynchronize(CUevent e) { return cu.cuEventSynchronize(e); }
static CUresult k_cuEventElapsedTime(float* ms, CUevent a, CUevent b) { return cu.cuEventElapsedTime(ms, a, b); }
static CUresult k_cuStreamBeginCapture(CUstream s) { return cu.cuStreamBeginCapture(s, 2); } // relaxed
static CUresult k_cuStreamEndCapture(CUstream s, CUgraph* g) { return cu.cuStreamEndCapture(s, g); }
static CUresult k_cuGraphInstantiate(CUgraphExec* x, CUgraph g) { return cu.cuGraphInstantiateWithFlags(x, g, 0); }
static CUresult k_cuGraphLaunch(CUgraphExec x, CUstream s) { return cu.cuGraphLaunch(x, s); }
static CUresult k_cuGraphDestroy(CUgraph g) { return cu.cuGraphDestroy(g); }
static CUresult k_cuGraphExecDestroy(CUgraphExec x) { return cu.cuGraphExecDestroy(x); }

// k_launch launches f with one by-value argument: the ABI struct at args.
static CUresult k_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                         unsigned smem, CUstream s, void* args) {
	void* params[1] = {args};
	return cu.cuLaunchKernel(f, gx, gy, gz, bx, 1, 1, smem, s, params, NULL);
}

// k_launch_pdl launches f as k_launch does, with programmatic stream
// serialization allowed: f may start before the kernel ahead of it in the
// stream ends, and waits for it where it executes griddepcontrol.wait.
static CUresult k_launch_pdl(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                             unsigned smem, CUstream s, void* args) {
	void* params[1] = {args};
	kmoe_launch_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.id = KMOE_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
	attr.value.i = 1;
	kmoe_launch_config c = {gx, gy, gz, bx, 1, 1, smem, s, &attr, 1};
	return cu.cuLaunchKernelEx(&c, f, params, NULL);
}

static int k_has_launch_ex(void) { return cu.cuLaunchKernelEx != NULL; }

static nvrtcResult k_nvrtcVersion(int* a, int* b) { return nv.nvrtcVersion(a, b); }
static nvrtcResult k_nvrtcCreateProgram(nvrtcProgram* p, const char* src, const char* name) {
	return nv.nvrtcCreateProgram(p, src, name, 0, NULL, NULL);
}
static nvrtcResult k_nvrtcCompileProgram(nvrtcProgram p, int n, char** opts) {
	return nv.nvrtcCompileProgram(p, n, (const char* const*)opts);
}
static nvrtcResult k_nvrtcGetProgramLogSize(nvrtcProgram p, size_t* n) { return nv.nvrtcGetProgramLogSize(p, n); }
static nvrtcResult k_nvrtcGetProgramLog(nvrtcProgram p, char* s) { return nv.nvrtcGetProgramLog(p, s); }
static nvrtcResult k_nvrtcGetCUBINSize(nvrtcProgram p, size_t* n) { return nv.nvrtcGetCUBINSize(p, n); }
static nvrtcResult k_nvrtcGetCUBIN(nvrtcProgram p, char* s) { return nv.nvrtcGetCUBIN(p, s); }
static nvrtcResult k_nvrtcDestroyProgram(nvrtcProgram* p) { return nv.nvrtcDestroyProgram(p); }
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Go wrappers over the table, one a driver call, named as the driver names
// them without the "cu" prefix. Handles are opaque pointers; device memory
// is a uint64. Every call returns the driver's result through check, as an
// *Error.

type (
	Context   = C.CUcontext   // a primary context
	Module    = C.CUmodule    // a loaded cubin
	Function  = C.CUfunction  // a kernel of a module
	Stream    = C.CUstream    // nil is the legacy default stream
	Event     = C.CUevent     // timing events
	Graph     = C.CUgraph     // a captured graph
	GraphExec = C.CUgraphExec // its instantiation
	Ptr       = uint64        // device memory
)

func check(call string, r C.CUresult) error {
	if r == 0 {
		return nil
	}
	return &Error{Call: call, Code: int(r), Name: C.GoString(C.kmoe_error_name(r))}
}

// dlLoadCUDA loads the driver table; "" on success, else why it failed
// (dlerror's text, or "missing symbol NAME").
func loadCUDA(path string) (why string) {
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	if bad := C.kmoe_load_cuda(cs); bad != nil {
		return C.GoString(bad)
	}
	return ""
}

func loadNVRTC(path string) (why string) {
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	if bad := C.kmoe_load_nvrtc(cs); bad != nil {
		return C.GoString(bad)
	}
	return ""
}

func Init() error { return check("cuInit", C.k_cuInit()) }

func DeviceCount() (int, error) {
	var n C.int
	err := check("cuDeviceGetCount", C.k_cuDeviceGetCount(&n))
	return int(n), err
}

func DeviceGet(i int) (int, error) {
	var d C.CUdevice
	err := check("cuDeviceGet", C.k_cuDeviceGet(&d, C.int(i)))
	return int(d), err
}

func DeviceName(d int) (string, error) {
	buf := make([]byte, 256)
	err := check("cuDeviceGetName", C.k_cuDeviceGetName((*C.char)(unsafe.Pointer(&buf[0])), 256, C.CUdevice(d)))
	n := 0
	for n < len(buf) && buf[n] != 0 {
		n++
	}
	return string(buf[:n]), err
}

func DeviceAttribute(d, attr int) (int, error) {
	var v C.int
	err := check("cuDeviceGetAttribute", C.k_cuDeviceGetAttribute(&v, C.int(attr), C.CUdevice(d)))
	return int(v), err
}

func PrimaryCtxRetain(d int) (Context, error) {
	var c C.CUcontext
	err := check("cuDevicePrimaryCtxRetain", C.k_cuDevicePrimaryCtxRetain(&c, C.CUdevice(d)))
	return c, err
}

func PrimaryCtxRelease(d int) error {
	return check("cuDevicePrimaryCtxRelease", C.k_cuDevicePrimaryCtxRelease(C.CUdevice(d)))
}

func CtxSetCurrent(c Context) error { return check("cuCtxSetCurrent", C.k_cuCtxSetCurrent(c)) }

func ModuleLoadData(image []byte) (Module, error) {
	var m C.CUmodule
	p := C.CBytes(image)
	defer C.free(p)
	err := check("cuModuleLoadData", C.k_cuModuleLoadData(&m, p))
	return m, err
}

func ModuleUnload(m Module) error { return check("cuModuleUnload", C.k_cuModuleUnload(m)) }

func ModuleGetFunction(m Module, name string) (Function, error) {
	var f C.CUfunction
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	err := check("cuModuleGetFunction "+name, C.k_cuModuleGetFunction(&f, m, cs))
	return f, err
}

// FuncSetMaxDynamicSmem lets f use n bytes of dynamic shared memory
// (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8), above the 48 KB
// a launch gets without opting in.
func FuncSetMaxDynamicSmem(f Function, n int) error {
	return check("cuFuncSetAttribute", C.k_cuFuncSetAttribute(f, 8, C.int(n)))
}

// FuncLocalBytes is the local memory a thread of f uses
// (CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES): nonzero where ptxas spilled.
func FuncLocalBytes(f Function) (int, error) {
	var v C.int
	err := check("cuFuncGetAttribute", C.k_cuFuncGetAttribute(&v, 3, f))
	return int(v), err
}

// FuncResidentCTAs is how many CTAs of f, threads a CTA with smem bytes
// of dynamic shared memory, an SM holds at once (the driver's occupancy
// from f's registers and shared memory).
func FuncResidentCTAs(f Function, threads, smem int) (int, error) {
	var n C.int
	err := check("cuOccupancyMaxActiveBlocksPerMultiprocessor", C.k_cuOccupancy(&n, f, C.int(threads), C.size_t(smem)))
	return int(n), err
}

func MemAlloc(n int) (Ptr, error) {
	var p C.CUdeviceptr
	if n == 0 {
		n = 256 // a real pointer, so kernels never see 0
	}
	err := check("cuMemAlloc", C.k_cuMemAlloc(&p, C.size_t(n)))
	return Ptr(p), err
}

func MemFree(p Ptr) error { return check("cuMemFree", C.k_cuMemFree(C.CUdeviceptr(p))) }

// MemcpyHtoD copies a Go byte slice to the device. The copy is issued on
// s and is complete when the call returns for pageable memory (the driver
// stages it), so the slice may be reused afterwards.
func MemcpyHtoD(dst Ptr, src []byte, s Stream) error {
	if len(src) == 0 {
		return nil
	}
	return check("cuMemcpyHtoDAsync", C.k_cuMemcpyHtoDAsync(C.CUdeviceptr(dst), unsafe.Pointer(&src[0]), C.size_t(len(src)), s))
}

// MemcpyDtoH copies to a Go slice; the caller synchronizes s before
// reading it (pageable destination: the driver completes it synchronously).
func MemcpyDtoH(dst []byte, src Ptr, s Stream) error {
	if len(dst) == 0 {
		return nil
	}
	return check("cuMemcpyDtoHAsync", C.k_cuMemcpyDtoHAsync(unsafe.Pointer(&dst[0]), C.CUdeviceptr(src), C.size_t(len(dst)), s))
}

func MemcpyDtoD(dst, src Ptr, n int, s Stream) error {
	return check("cuMemcpyDtoDAsync", C.k_cuMemcpyDtoDAsync(C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(n), s))
}

func MemsetD32(dst Ptr, v uint32, n int, s Stream) error {
	return check("cuMemsetD32Async", C.k_cuMemsetD32Async(C.CUdeviceptr(dst), C.uint(v), C.size_t(n), s))
}

// Launch launches f with its ABI argument struct (copied by the driver
// at launch, and into the node when a graph is being captured).
func Launch[A any](f Function, grid [3]int, block, smem int, s Stream, args *A) error {
	return check("cuLaunchKernel", C.k_launch(f, C.uint(grid[0]), C.uint(grid[1]), C.uint(grid[2]), C.uint(block),
		C.uint(smem), s, unsafe.Pointer(args)))
}

// LaunchPDL launches f as Launch does, with programmatic dependent
// launch (f must execute griddepcontrol.wait before it reads what the
// kernel ahead of it writes); where the driver has no cuLaunchKernelEx it
// is Launch.
func LaunchPDL[A any](f Function, grid [3]int, block, smem int, s Stream, args *A) error {
	if C.k_has_launch_ex() == 0 {
		return Launch(f, grid, block, smem, s, args)
	}
	return check("cuLaunchKernelEx", C.k_launch_pdl(f, C.uint(grid[0]), C.uint(grid[1]), C.uint(grid[2]), C.uint(block),
		C.uint(smem), s, unsafe.Pointer(args)))
}

func StreamCreate() (Stream, error) {
	var s C.CUstream
	err := check("cuStreamCreate", C.k_cuStreamCreate(&s))
	return s, err
}

func StreamDestroy(s Stream) error { return check("cuStreamDestroy", C.k_cuStreamDestroy(s)) }
func StreamSync(s Stream) error    { return check("cuStreamSynchronize", C.k_cuStreamSynchronize(s)) }

// StreamQuery reports whether everything issued to s has finished.
func StreamQuery(s Stream) (done bool, err error) {
	r := C.k_cuStreamQuery(s)
	if r == 600 { // CUDA_ERROR_NOT_READY
		return false, nil
	}
	return true, check("cuStreamQuery", r)
}

func EventCreate() (Event, error) {
	var e C.CUevent
	err := check("cuEventCreate", C.k_cuEventCreate(&e))
	return e, err
}

func EventDestroy(e Event) error { return check("cuEventDestroy", C.k_cuEventDestroy(e)) }
func EventRecord(e Event, s Stream) error {
	return check("cuEventRecord", C.k_cuEventRecord(e, s))
}
func EventSync(e Event) error { return check("cuEventSynchronize", C.k_cuEventSynchronize(e)) }

func EventElapsed(a, b Event) (float64, error) {
	var ms C.float
	err := check("cuEventElapsedTime", C.k_cuEventElapsedTime(&ms, a, b))
	return float64(ms), err
}

func StreamBeginCapture(s Stream) error {
	return check("cuStreamBeginCapture", C.k_cuStreamBeginCapture(s))
}

func StreamEndCapture(s Stream) (Graph, error) {
	var g C.CUgraph
	err := check("cuStreamEndCapture", C.k_cuStreamEndCapture(s, &g))
	return g, err
}

func GraphInstantiate(g Graph) (GraphExec, error) {
	var x C.CUgraphExec
	err := check("cuGraphInstantiateWithFlags", C.k_cuGraphInstantiate(&x, g))
	return x, err
}

func GraphLaunch(x GraphExec, s Stream) error {
	return check("cuGraphLaunch", C.k_cuGraphLaunch(x, s))
}
func GraphDestroy(g Graph) error { return check("cuGraphDestroy", C.k_cuGraphDestroy(g)) }
func GraphExecDestroy(x GraphExec) error {
	return check("cuGraphExecDestroy", C.k_cuGraphExecDestroy(x))
}

func nvrtcCheck(call string, r C.nvrtcResult) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("cuda: %s: nvrtc error %d", call, int(r))
}

func NVRTCVersion() (major, minor int, err error) {
	var a, b C.int
	err = nvrtcCheck("nvrtcVersion", C.k_nvrtcVersion(&a, &b))
	return int(a), int(b), err
}

// Compile compiles src with NVRTC for arch with opts and returns the
// cubin and NVRTC's log (ptxas's notes where opts ask for them); on a
// compile error it returns a *CompileError holding the log.
func Compile(src, name, arch string, opts []string) (cubin []byte, log string, err error) {
	csrc, cname := C.CString(src), C.CString(name)
	defer C.free(unsafe.Pointer(csrc))
	defer C.free(unsafe.Pointer(cname))
	var prog C.nvrtcProgram
	if err := nvrtcCheck("nvrtcCreateProgram", C.k_nvrtcCreateProgram(&prog, csrc, cname)); err != nil {
		return nil, "", err
	}
	defer C.k_nvrtcDestroyProgram(&prog)
	copts := C.malloc(C.size_t(max(len(opts), 1)) * C.size_t(unsafe.Sizeof(uintptr(0))))
	defer C.free(copts)
	ptrs := unsafe.Slice((**C.char)(copts), len(opts))
	for i, o := range opts {
		ptrs[i] = C.CString(o)
		defer C.free(unsafe.Pointer(ptrs[i]))
	}
	r := C.k_nvrtcCompileProgram(prog, C.int(len(opts)), (**C.char)(copts))
	var logSize C.size_t
	C.k_nvrtcGetProgramLogSize(prog, &logSize)
	if logSize > 1 {
		buf := make([]byte, int(logSize))
		C.k_nvrtcGetProgramLog(prog, (*C.char)(unsafe.Pointer(&buf[0])))
		log = string(buf[:len(buf)-1])
	}
	if r != 0 {
		return nil, log, &CompileError{Arch: arch, Log: log}
	}
	var n C.size_t
	if err := nvrtcCheck("nvrtcGetCUBINSize", C.k_nvrtcGetCUBINSize(prog, &n)); err != nil {
		return nil, log, err
	}
	cubin = make([]byte, int(n))
	if err := nvrtcCheck("nvrtcGetCUBIN", C.k_nvrtcGetCUBIN(prog, (*C.char)(unsafe.Pointer(&cubin[0])))); err != nil {
		return nil, log, err
	}
	return cubin, log, nil
}
