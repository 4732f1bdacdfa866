//go:build cgo

package cuda

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

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

// The driver and NVRTC entry points kimimoe uses, resolved with dlsym.
typedef struct {
	void* libcuda;
	void* libnvrtc;
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
	nvrtcResult (*nvrtcVersion)(int*, int*);
	nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*);
	nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram, int, const char* const*);
	nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram, size_t*);
	nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram, char*);
	nvrtcResult (*nvrtcGetCUBINSize)(nvrtcProgram, size_t*);
	nvrtcResult (*nvrtcGetCUBIN)(nvrtcProgram, char*);
	nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram*);
} kmoe_api;

static kmoe_api api;

#define SYM(lib, field, name) do { *(void**)(&api.field) = dlsym(lib, name); if (!api.field) return name; } while (0)
// SYM2 takes the versioned name where the driver has it, else the plain one.
#define SYM2(lib, field, name, fallback) do { *(void**)(&api.field) = dlsym(lib, name); \
	if (!api.field) *(void**)(&api.field) = dlsym(lib, fallback); if (!api.field) return name; } while (0)

// kmoe_load_cuda opens the driver and resolves its symbols. It returns
// NULL on success, else the library or symbol that failed.
const char* kmoe_load_cuda(const char* path) {
	if (api.libcuda) return NULL;
	void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) return path;
	api.libcuda = h;
	SYM(h, cuInit, "cuInit");
	SYM(h, cuDeviceGetCount, "cuDeviceGetCount");
	SYM(h, cuDeviceGet, "cuDeviceGet");
	SYM(h, cuDeviceGetName, "cuDeviceGetName");
	SYM(h, cuDeviceGetAttribute, "cuDeviceGetAttribute");
	SYM(h, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
	SYM2(h, cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease");
	SYM(h, cuCtxSetCurrent, "cuCtxSetCurrent");
	SYM(h, cuModuleLoadData, "cuModuleLoadData");
	SYM(h, cuModuleUnload, "cuModuleUnload");
	SYM(h, cuModuleGetFunction, "cuModuleGetFunction");
	SYM(h, cuMemAlloc, "cuMemAlloc_v2");
	SYM(h, cuMemFree, "cuMemFree_v2");
	SYM(h, cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
	SYM(h, cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
	SYM(h, cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
	SYM(h, cuMemsetD32Async, "cuMemsetD32Async");
	SYM(h, cuLaunchKernel, "cuLaunchKernel");
	SYM(h, cuStreamCreate, "cuStreamCreate");
	SYM(h, cuStreamDestroy, "cuStreamDestroy_v2");
	SYM(h, cuStreamSynchronize, "cuStreamSynchronize");
	SYM(h, cuEventCreate, "cuEventCreate");
	SYM(h, cuEventDestroy, "cuEventDestroy_v2");
	SYM(h, cuEventRecord, "cuEventRecord");
	SYM(h, cuEventSynchronize, "cuEventSynchronize");
	SYM2(h, cuEventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime");
	SYM2(h, cuStreamBeginCapture, "cuStreamBeginCapture_v2", "cuStreamBeginCapture");
	SYM(h, cuStreamEndCapture, "cuStreamEndCapture");
	SYM(h, cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags");
	SYM(h, cuGraphLaunch, "cuGraphLaunch");
	SYM(h, cuGraphDestroy, "cuGraphDestroy");
	SYM(h, cuGraphExecDestroy, "cuGraphExecDestroy");
	SYM(h, cuGetErrorName, "cuGetErrorName");
	return NULL;
}

const char* kmoe_load_nvrtc(const char* path) {
	if (api.libnvrtc) return NULL;
	void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) return path;
	api.libnvrtc = h;
	SYM(h, nvrtcVersion, "nvrtcVersion");
	SYM(h, nvrtcCreateProgram, "nvrtcCreateProgram");
	SYM(h, nvrtcCompileProgram, "nvrtcCompileProgram");
	SYM(h, nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize");
	SYM(h, nvrtcGetProgramLog, "nvrtcGetProgramLog");
	SYM(h, nvrtcGetCUBINSize, "nvrtcGetCUBINSize");
	SYM(h, nvrtcGetCUBIN, "nvrtcGetCUBIN");
	SYM(h, nvrtcDestroyProgram, "nvrtcDestroyProgram");
	return NULL;
}

// kmoe_unload_cuda forgets the driver's entries and keeps NVRTC's.
static void kmoe_unload_cuda(void) {
	kmoe_api keep = api;
	if (api.libcuda) dlclose(api.libcuda);
	memset(&api, 0, sizeof api);
	api.libnvrtc = keep.libnvrtc;
	api.nvrtcVersion = keep.nvrtcVersion;
	api.nvrtcCreateProgram = keep.nvrtcCreateProgram;
	api.nvrtcCompileProgram = keep.nvrtcCompileProgram;
	api.nvrtcGetProgramLogSize = keep.nvrtcGetProgramLogSize;
	api.nvrtcGetProgramLog = keep.nvrtcGetProgramLog;
	api.nvrtcGetCUBINSize = keep.nvrtcGetCUBINSize;
	api.nvrtcGetCUBIN = keep.nvrtcGetCUBIN;
	api.nvrtcDestroyProgram = keep.nvrtcDestroyProgram;
}

static void kmoe_unload_nvrtc(void) {
	if (api.libnvrtc) dlclose(api.libnvrtc);
	api.libnvrtc = NULL;
	api.nvrtcVersion = NULL;
}

static const char* kmoe_error_name(CUresult r) {
	const char* s = NULL;
	if (api.cuGetErrorName && api.cuGetErrorName(r, &s) == 0 && s) return s;
	return "CUDA_ERROR_UNKNOWN";
}

// Thin wrappers: cgo cannot call C function pointers directly.
static CUresult k_cuInit(void) { return api.cuInit(0); }
static CUresult k_cuDeviceGetCount(int* n) { return api.cuDeviceGetCount(n); }
static CUresult k_cuDeviceGet(CUdevice* d, int i) { return api.cuDeviceGet(d, i); }
static CUresult k_cuDeviceGetName(char* s, int n, CUdevice d) { return api.cuDeviceGetName(s, n, d); }
static CUresult k_cuDeviceGetAttribute(int* v, int a, CUdevice d) { return api.cuDeviceGetAttribute(v, a, d); }
static CUresult k_cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice d) { return api.cuDevicePrimaryCtxRetain(c, d); }
static CUresult k_cuDevicePrimaryCtxRelease(CUdevice d) { return api.cuDevicePrimaryCtxRelease(d); }
static CUresult k_cuCtxSetCurrent(CUcontext c) { return api.cuCtxSetCurrent(c); }
static CUresult k_cuModuleLoadData(CUmodule* m, const void* img) { return api.cuModuleLoadData(m, img); }
static CUresult k_cuModuleUnload(CUmodule m) { return api.cuModuleUnload(m); }
static CUresult k_cuModuleGetFunction(CUfunction* f, CUmodule m, const char* n) { return api.cuModuleGetFunction(f, m, n); }
static CUresult k_cuMemAlloc(CUdeviceptr* p, size_t n) { return api.cuMemAlloc(p, n); }
static CUresult k_cuMemFree(CUdeviceptr p) { return api.cuMemFree(p); }
static CUresult k_cuMemcpyHtoDAsync(CUdeviceptr d, const void* s, size_t n, CUstream st) { return api.cuMemcpyHtoDAsync(d, s, n, st); }
static CUresult k_cuMemcpyDtoHAsync(void* d, CUdeviceptr s, size_t n, CUstream st) { return api.cuMemcpyDtoHAsync(d, s, n, st); }
static CUresult k_cuMemcpyDtoDAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { return api.cuMemcpyDtoDAsync(d, s, n, st); }
static CUresult k_cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, CUstream st) { return api.cuMemsetD32Async(d, v, n, st); }
static CUresult k_cuStreamCreate(CUstream* s) { return api.cuStreamCreate(s, 1); } // non-blocking
static CUresult k_cuStreamDestroy(CUstream s) { return api.cuStreamDestroy(s); }
static CUresult k_cuStreamSynchronize(CUstream s) { return api.cuStreamSynchronize(s); }
static CUresult k_cuEventCreate(CUevent* e) { return api.cuEventCreate(e, 0); }
static CUresult k_cuEventDestroy(CUevent e) { return api.cuEventDestroy(e); }
static CUresult k_cuEventRecord(CUevent e, CUstream s) { return api.cuEventRecord(e, s); }
static CUresult k_cuEventSynchronize(CUevent e) { return api.cuEventSynchronize(e); }
static CUresult k_cuEventElapsedTime(float* ms, CUevent a, CUevent b) { return api.cuEventElapsedTime(ms, a, b); }
static CUresult k_cuStreamBeginCapture(CUstream s) { return api.cuStreamBeginCapture(s, 2); } // relaxed
static CUresult k_cuStreamEndCapture(CUstream s, CUgraph* g) { return api.cuStreamEndCapture(s, g); }
static CUresult k_cuGraphInstantiate(CUgraphExec* x, CUgraph g) { return api.cuGraphInstantiateWithFlags(x, g, 0); }
static CUresult k_cuGraphLaunch(CUgraphExec x, CUstream s) { return api.cuGraphLaunch(x, s); }
static CUresult k_cuGraphDestroy(CUgraph g) { return api.cuGraphDestroy(g); }
static CUresult k_cuGraphExecDestroy(CUgraphExec x) { return api.cuGraphExecDestroy(x); }

// k_launch packs up to 24 kernel arguments, each given as its 8-byte slot
// value and its size, into the pointer array cuLaunchKernel wants.
static CUresult k_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                         unsigned smem, CUstream s, int n, const unsigned long long* vals) {
	unsigned long long slots[24];
	void* params[24];
	if (n > 24) return 1;
	for (int i = 0; i < n; i++) {
		slots[i] = vals[i];
		params[i] = &slots[i];
	}
	return api.cuLaunchKernel(f, gx, gy, gz, bx, 1, 1, smem, s, params, NULL);
}

static nvrtcResult k_nvrtcVersion(int* a, int* b) { return api.nvrtcVersion(a, b); }
static nvrtcResult k_nvrtcCreateProgram(nvrtcProgram* p, const char* src, const char* name) {
	return api.nvrtcCreateProgram(p, src, name, 0, NULL, NULL);
}
static nvrtcResult k_nvrtcCompileProgram(nvrtcProgram p, int n, char** opts) {
	return api.nvrtcCompileProgram(p, n, (const char* const*)opts);
}
static nvrtcResult k_nvrtcGetProgramLogSize(nvrtcProgram p, size_t* n) { return api.nvrtcGetProgramLogSize(p, n); }
static nvrtcResult k_nvrtcGetProgramLog(nvrtcProgram p, char* s) { return api.nvrtcGetProgramLog(p, s); }
static nvrtcResult k_nvrtcGetCUBINSize(nvrtcProgram p, size_t* n) { return api.nvrtcGetCUBINSize(p, n); }
static nvrtcResult k_nvrtcGetCUBIN(nvrtcProgram p, char* s) { return api.nvrtcGetCUBIN(p, s); }
static nvrtcResult k_nvrtcDestroyProgram(nvrtcProgram* p) { return api.nvrtcDestroyProgram(p); }
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Go wrappers over the table. Handles are opaque pointers; device memory is
// a uint64. Every call returns the driver's result through check.

type (
	cuContext  = C.CUcontext
	cuModule   = C.CUmodule
	cuFunction = C.CUfunction
	cuStream   = C.CUstream
	cuEvent    = C.CUevent
	cuGraph    = C.CUgraph
	cuGraphX   = C.CUgraphExec
	devptr     = uint64
)

func check(call string, r C.CUresult) error {
	if r == 0 {
		return nil
	}
	return &Error{Call: call, Code: int(r), Name: C.GoString(C.kmoe_error_name(r))}
}

func dlLoadCUDA(path string) (failed string) {
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	if bad := C.kmoe_load_cuda(cs); bad != nil {
		return C.GoString(bad)
	}
	return ""
}

func dlLoadNVRTC(path string) (failed string) {
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	if bad := C.kmoe_load_nvrtc(cs); bad != nil {
		failed = C.GoString(bad)
		C.kmoe_unload_nvrtc()
	}
	return failed
}

func dlUnloadCUDA() { C.kmoe_unload_cuda() }

func cuInit() error { return check("cuInit", C.k_cuInit()) }

func cuDeviceCount() (int, error) {
	var n C.int
	err := check("cuDeviceGetCount", C.k_cuDeviceGetCount(&n))
	return int(n), err
}

func cuDeviceGet(i int) (int, error) {
	var d C.CUdevice
	err := check("cuDeviceGet", C.k_cuDeviceGet(&d, C.int(i)))
	return int(d), err
}

func cuDeviceName(d int) (string, error) {
	buf := make([]byte, 256)
	err := check("cuDeviceGetName", C.k_cuDeviceGetName((*C.char)(unsafe.Pointer(&buf[0])), 256, C.CUdevice(d)))
	n := 0
	for n < len(buf) && buf[n] != 0 {
		n++
	}
	return string(buf[:n]), err
}

func cuDeviceAttribute(d, attr int) (int, error) {
	var v C.int
	err := check("cuDeviceGetAttribute", C.k_cuDeviceGetAttribute(&v, C.int(attr), C.CUdevice(d)))
	return int(v), err
}

func cuPrimaryCtxRetain(d int) (cuContext, error) {
	var c C.CUcontext
	err := check("cuDevicePrimaryCtxRetain", C.k_cuDevicePrimaryCtxRetain(&c, C.CUdevice(d)))
	return c, err
}

func cuPrimaryCtxRelease(d int) error {
	return check("cuDevicePrimaryCtxRelease", C.k_cuDevicePrimaryCtxRelease(C.CUdevice(d)))
}

func cuCtxSetCurrent(c cuContext) error { return check("cuCtxSetCurrent", C.k_cuCtxSetCurrent(c)) }

func cuModuleLoadData(image []byte) (cuModule, error) {
	var m C.CUmodule
	p := C.CBytes(image)
	defer C.free(p)
	err := check("cuModuleLoadData", C.k_cuModuleLoadData(&m, p))
	return m, err
}

func cuModuleUnload(m cuModule) error { return check("cuModuleUnload", C.k_cuModuleUnload(m)) }

func cuModuleGetFunction(m cuModule, name string) (cuFunction, error) {
	var f C.CUfunction
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	err := check("cuModuleGetFunction "+name, C.k_cuModuleGetFunction(&f, m, cs))
	return f, err
}

func cuMemAlloc(n int) (devptr, error) {
	var p C.CUdeviceptr
	if n == 0 {
		n = 256 // a real pointer, so kernels never see 0
	}
	err := check("cuMemAlloc", C.k_cuMemAlloc(&p, C.size_t(n)))
	return devptr(p), err
}

func cuMemFree(p devptr) error { return check("cuMemFree", C.k_cuMemFree(C.CUdeviceptr(p))) }

// cuMemcpyHtoD copies a Go byte slice to the device. The copy is issued on
// s and is complete when the call returns for pageable memory (the driver
// stages it), so the slice may be reused afterwards.
func cuMemcpyHtoD(dst devptr, src []byte, s cuStream) error {
	if len(src) == 0 {
		return nil
	}
	return check("cuMemcpyHtoDAsync", C.k_cuMemcpyHtoDAsync(C.CUdeviceptr(dst), unsafe.Pointer(&src[0]), C.size_t(len(src)), s))
}

// cuMemcpyDtoH copies to a Go slice; the caller synchronizes s before
// reading it (pageable destination: the driver completes it synchronously).
func cuMemcpyDtoH(dst []byte, src devptr, s cuStream) error {
	if len(dst) == 0 {
		return nil
	}
	return check("cuMemcpyDtoHAsync", C.k_cuMemcpyDtoHAsync(unsafe.Pointer(&dst[0]), C.CUdeviceptr(src), C.size_t(len(dst)), s))
}

func cuMemcpyDtoD(dst, src devptr, n int, s cuStream) error {
	return check("cuMemcpyDtoDAsync", C.k_cuMemcpyDtoDAsync(C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(n), s))
}

func cuMemsetD32(dst devptr, v uint32, n int, s cuStream) error {
	return check("cuMemsetD32Async", C.k_cuMemsetD32Async(C.CUdeviceptr(dst), C.uint(v), C.size_t(n), s))
}

func cuLaunch(f cuFunction, grid [3]int, block, smem int, s cuStream, args []uint64) error {
	return check("cuLaunchKernel", C.k_launch(f, C.uint(grid[0]), C.uint(grid[1]), C.uint(grid[2]), C.uint(block),
		C.uint(smem), s, C.int(len(args)), (*C.ulonglong)(unsafe.Pointer(&args[0]))))
}

func cuStreamCreate() (cuStream, error) {
	var s C.CUstream
	err := check("cuStreamCreate", C.k_cuStreamCreate(&s))
	return s, err
}

func cuStreamDestroy(s cuStream) error { return check("cuStreamDestroy", C.k_cuStreamDestroy(s)) }
func cuStreamSync(s cuStream) error    { return check("cuStreamSynchronize", C.k_cuStreamSynchronize(s)) }

func cuEventCreate() (cuEvent, error) {
	var e C.CUevent
	err := check("cuEventCreate", C.k_cuEventCreate(&e))
	return e, err
}

func cuEventDestroy(e cuEvent) error { return check("cuEventDestroy", C.k_cuEventDestroy(e)) }
func cuEventRecord(e cuEvent, s cuStream) error {
	return check("cuEventRecord", C.k_cuEventRecord(e, s))
}
func cuEventSync(e cuEvent) error { return check("cuEventSynchronize", C.k_cuEventSynchronize(e)) }

func cuEventElapsed(a, b cuEvent) (float64, error) {
	var ms C.float
	err := check("cuEventElapsedTime", C.k_cuEventElapsedTime(&ms, a, b))
	return float64(ms), err
}

func cuStreamBeginCapture(s cuStream) error {
	return check("cuStreamBeginCapture", C.k_cuStreamBeginCapture(s))
}

func cuStreamEndCapture(s cuStream) (cuGraph, error) {
	var g C.CUgraph
	err := check("cuStreamEndCapture", C.k_cuStreamEndCapture(s, &g))
	return g, err
}

func cuGraphInstantiate(g cuGraph) (cuGraphX, error) {
	var x C.CUgraphExec
	err := check("cuGraphInstantiateWithFlags", C.k_cuGraphInstantiate(&x, g))
	return x, err
}

func cuGraphLaunch(x cuGraphX, s cuStream) error {
	return check("cuGraphLaunch", C.k_cuGraphLaunch(x, s))
}
func cuGraphDestroy(g cuGraph) error { return check("cuGraphDestroy", C.k_cuGraphDestroy(g)) }
func cuGraphExecDestroy(x cuGraphX) error {
	return check("cuGraphExecDestroy", C.k_cuGraphExecDestroy(x))
}

func nvrtcCheck(call string, r C.nvrtcResult) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("cuda: %s: nvrtc error %d", call, int(r))
}

func nvrtcVersion() (major, minor int, err error) {
	var a, b C.int
	err = nvrtcCheck("nvrtcVersion", C.k_nvrtcVersion(&a, &b))
	return int(a), int(b), err
}

// nvrtcCompile compiles src to a cubin with opts; on a compile error it
// returns the log in a *CompileError.
func nvrtcCompile(src, name, arch string, opts []string) ([]byte, error) {
	csrc, cname := C.CString(src), C.CString(name)
	defer C.free(unsafe.Pointer(csrc))
	defer C.free(unsafe.Pointer(cname))
	var prog C.nvrtcProgram
	if err := nvrtcCheck("nvrtcCreateProgram", C.k_nvrtcCreateProgram(&prog, csrc, cname)); err != nil {
		return nil, err
	}
	defer C.k_nvrtcDestroyProgram(&prog)
	copts := C.malloc(C.size_t(len(opts)) * C.size_t(unsafe.Sizeof(uintptr(0))))
	defer C.free(copts)
	ptrs := unsafe.Slice((**C.char)(copts), len(opts))
	for i, o := range opts {
		ptrs[i] = C.CString(o)
		defer C.free(unsafe.Pointer(ptrs[i]))
	}
	r := C.k_nvrtcCompileProgram(prog, C.int(len(opts)), (**C.char)(copts))
	var logSize C.size_t
	C.k_nvrtcGetProgramLogSize(prog, &logSize)
	log := ""
	if logSize > 1 {
		buf := make([]byte, int(logSize))
		C.k_nvrtcGetProgramLog(prog, (*C.char)(unsafe.Pointer(&buf[0])))
		log = string(buf[:len(buf)-1])
	}
	if r != 0 {
		return nil, &CompileError{Arch: arch, Log: log}
	}
	var n C.size_t
	if err := nvrtcCheck("nvrtcGetCUBINSize", C.k_nvrtcGetCUBINSize(prog, &n)); err != nil {
		return nil, err
	}
	cubin := make([]byte, int(n))
	if err := nvrtcCheck("nvrtcGetCUBIN", C.k_nvrtcGetCUBIN(prog, (*C.char)(unsafe.Pointer(&cubin[0])))); err != nil {
		return nil, err
	}
	return cubin, nil
}
