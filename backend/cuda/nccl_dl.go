//go:build cgo

package cuda

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

// NCCL's types as its ABI has them (nccl.h): results and data types are
// enums (int), a communicator is a pointer, the unique id 128 bytes passed
// by value, a stream the CUDA stream handle.
typedef int ncclResult_t;
typedef void* ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef void* kmoe_stream;

typedef struct {
	void* lib;
	ncclResult_t (*ncclGetVersion)(int*);
	ncclResult_t (*ncclGetUniqueId)(ncclUniqueId*);
	ncclResult_t (*ncclCommInitRank)(ncclComm_t*, int, ncclUniqueId, int);
	ncclResult_t (*ncclCommInitAll)(ncclComm_t*, int, const int*);
	ncclResult_t (*ncclCommDestroy)(ncclComm_t);
	ncclResult_t (*ncclCommAbort)(ncclComm_t);
	ncclResult_t (*ncclCommGetAsyncError)(ncclComm_t, ncclResult_t*);
	const char* (*ncclGetErrorString)(ncclResult_t);
	const char* (*ncclGetLastError)(ncclComm_t);
	ncclResult_t (*ncclAllReduce)(const void*, void*, size_t, int, int, ncclComm_t, kmoe_stream);
	ncclResult_t (*ncclAllGather)(const void*, void*, size_t, int, ncclComm_t, kmoe_stream);
	ncclResult_t (*ncclSend)(const void*, size_t, int, int, ncclComm_t, kmoe_stream);
	ncclResult_t (*ncclRecv)(void*, size_t, int, int, ncclComm_t, kmoe_stream);
	ncclResult_t (*ncclGroupStart)(void);
	ncclResult_t (*ncclGroupEnd)(void);
} kmoe_nccl_api;

static kmoe_nccl_api nc;
static char kmoe_nccl_why[512];

#define NSYM(t, field, name) do { *(void**)(&t.field) = dlsym(h, name); \
	if (!t.field) { snprintf(kmoe_nccl_why, sizeof kmoe_nccl_why, "missing symbol %s", name); dlclose(h); return kmoe_nccl_why; } } while (0)

// kmoe_load_nccl opens NCCL and resolves its symbols into a local table,
// published only when complete; NULL on success (or if already loaded).
static const char* kmoe_load_nccl(const char* path) {
	if (nc.lib) return NULL;
	void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char* e = dlerror();
		snprintf(kmoe_nccl_why, sizeof kmoe_nccl_why, "%s", e ? e : "dlopen failed");
		return kmoe_nccl_why;
	}
	kmoe_nccl_api t = {0};
	NSYM(t, ncclGetVersion, "ncclGetVersion");
	NSYM(t, ncclGetUniqueId, "ncclGetUniqueId");
	NSYM(t, ncclCommInitRank, "ncclCommInitRank");
	NSYM(t, ncclCommInitAll, "ncclCommInitAll");
	NSYM(t, ncclCommDestroy, "ncclCommDestroy");
	NSYM(t, ncclCommAbort, "ncclCommAbort");
	NSYM(t, ncclCommGetAsyncError, "ncclCommGetAsyncError");
	NSYM(t, ncclGetErrorString, "ncclGetErrorString");
	NSYM(t, ncclGetLastError, "ncclGetLastError");
	NSYM(t, ncclAllReduce, "ncclAllReduce");
	NSYM(t, ncclAllGather, "ncclAllGather");
	NSYM(t, ncclSend, "ncclSend");
	NSYM(t, ncclRecv, "ncclRecv");
	NSYM(t, ncclGroupStart, "ncclGroupStart");
	NSYM(t, ncclGroupEnd, "ncclGroupEnd");
	t.lib = h;
	nc = t;
	return NULL;
}

static const char* k_ncclErrorString(ncclResult_t r) {
	const char* s = nc.ncclGetErrorString ? nc.ncclGetErrorString(r) : NULL;
	return s ? s : "unknown NCCL error";
}
static const char* k_ncclLastError(ncclComm_t c) {
	const char* s = nc.ncclGetLastError ? nc.ncclGetLastError(c) : NULL;
	return s ? s : "";
}
static ncclResult_t k_ncclGetVersion(int* v) { return nc.ncclGetVersion(v); }
static ncclResult_t k_ncclGetUniqueId(void* id) { return nc.ncclGetUniqueId((ncclUniqueId*)id); }
static ncclResult_t k_ncclCommInitRank(ncclComm_t* c, int n, const void* id, int r) {
	ncclUniqueId u;
	memcpy(&u, id, sizeof u);
	return nc.ncclCommInitRank(c, n, u, r);
}
static ncclResult_t k_ncclCommInitAll(ncclComm_t* c, int n, const int* devs) { return nc.ncclCommInitAll(c, n, devs); }
static ncclResult_t k_ncclCommDestroy(ncclComm_t c) { return nc.ncclCommDestroy(c); }
static ncclResult_t k_ncclCommAbort(ncclComm_t c) { return nc.ncclCommAbort(c); }
static ncclResult_t k_ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* r) { return nc.ncclCommGetAsyncError(c, r); }
static ncclResult_t k_ncclAllReduceSumF32(unsigned long long s, unsigned long long d, size_t n, ncclComm_t c, kmoe_stream st) {
	return nc.ncclAllReduce((const void*)s, (void*)d, n, 7, 0, c, st); // ncclFloat32, ncclSum
}
static ncclResult_t k_ncclAllGather(unsigned long long s, unsigned long long d, size_t n, int dtype, ncclComm_t c, kmoe_stream st) {
	return nc.ncclAllGather((const void*)s, (void*)d, n, dtype, c, st);
}
static ncclResult_t k_ncclSend(unsigned long long s, size_t n, int dtype, int peer, ncclComm_t c, kmoe_stream st) {
	return nc.ncclSend((const void*)s, n, dtype, peer, c, st);
}
static ncclResult_t k_ncclRecv(unsigned long long d, size_t n, int dtype, int peer, ncclComm_t c, kmoe_stream st) {
	return nc.ncclRecv((void*)d, n, dtype, peer, c, st);
}
static ncclResult_t k_ncclGroupStart(void) { return nc.ncclGroupStart(); }
static ncclResult_t k_ncclGroupEnd(void) { return nc.ncclGroupEnd(); }
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// NCCL data types (nccl.h's ncclDataType_t).
const (
	ncclUint8   = 1
	ncclInt32   = 2
	ncclFloat32 = 7
)

const ncclInProgress = 7 // ncclResult_t: a non-blocking call is still running

type ncclComm = C.ncclComm_t

// NCCLError is a failed NCCL call: its result code, NCCL's string for
// it, and the communicator's last error message when there is one.
type NCCLError struct {
	Call   string
	Code   int
	Name   string
	Detail string
}

func (e *NCCLError) Error() string {
	s := fmt.Sprintf("cuda: %s: %s (%d)", e.Call, e.Name, e.Code)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

func ncclCheck(call string, r C.ncclResult_t, c ncclComm) error {
	if r == 0 {
		return nil
	}
	e := &NCCLError{Call: call, Code: int(r), Name: C.GoString(C.k_ncclErrorString(r))}
	if c != nil {
		e.Detail = C.GoString(C.k_ncclLastError(c))
	}
	return e
}

func dlLoadNCCL(path string) (why string) {
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	if bad := C.kmoe_load_nccl(cs); bad != nil {
		return C.GoString(bad)
	}
	return ""
}

func ncclVersion() (int, error) {
	var v C.int
	err := ncclCheck("ncclGetVersion", C.k_ncclGetVersion(&v), nil)
	return int(v), err
}

func ncclGetUniqueID() (UniqueID, error) {
	var id UniqueID
	err := ncclCheck("ncclGetUniqueId", C.k_ncclGetUniqueId(unsafe.Pointer(&id[0])), nil)
	return id, err
}

func ncclCommInitRank(id UniqueID, size, rank int) (ncclComm, error) {
	var c ncclComm
	err := ncclCheck("ncclCommInitRank", C.k_ncclCommInitRank(&c, C.int(size), unsafe.Pointer(&id[0]), C.int(rank)), nil)
	return c, err
}

func ncclCommInitAll(devices []int) ([]ncclComm, error) {
	comms := make([]ncclComm, len(devices))
	devs := make([]C.int, len(devices))
	for i, d := range devices {
		devs[i] = C.int(d)
	}
	err := ncclCheck("ncclCommInitAll", C.k_ncclCommInitAll(&comms[0], C.int(len(devices)), &devs[0]), nil)
	return comms, err
}

func ncclCommDestroy(c ncclComm) error {
	return ncclCheck("ncclCommDestroy", C.k_ncclCommDestroy(c), nil)
}
func ncclCommAbort(c ncclComm) error { return ncclCheck("ncclCommAbort", C.k_ncclCommAbort(c), nil) }

// ncclAsyncError is the communicator's asynchronous error (nil: none).
func ncclAsyncError(c ncclComm) error {
	var r C.ncclResult_t
	if err := ncclCheck("ncclCommGetAsyncError", C.k_ncclCommGetAsyncError(c, &r), c); err != nil {
		return err
	}
	if r == 0 || r == ncclInProgress {
		return nil
	}
	return ncclCheck("NCCL (asynchronous)", r, c)
}

func ncclAllReduceSum(src, dst devptr, n int, c ncclComm, s cuStream) error {
	return ncclCheck("ncclAllReduce", C.k_ncclAllReduceSumF32(C.ulonglong(src), C.ulonglong(dst), C.size_t(n), c, C.kmoe_stream(s)), c)
}

func ncclAllGather(src, dst devptr, n, dtype int, c ncclComm, s cuStream) error {
	return ncclCheck("ncclAllGather", C.k_ncclAllGather(C.ulonglong(src), C.ulonglong(dst), C.size_t(n), C.int(dtype), c, C.kmoe_stream(s)), c)
}

func ncclSend(src devptr, n, dtype, peer int, c ncclComm, s cuStream) error {
	return ncclCheck("ncclSend", C.k_ncclSend(C.ulonglong(src), C.size_t(n), C.int(dtype), C.int(peer), c, C.kmoe_stream(s)), c)
}

func ncclRecv(dst devptr, n, dtype, peer int, c ncclComm, s cuStream) error {
	return ncclCheck("ncclRecv", C.k_ncclRecv(C.ulonglong(dst), C.size_t(n), C.int(dtype), C.int(peer), c, C.kmoe_stream(s)), c)
}

func ncclGroupStart() error { return ncclCheck("ncclGroupStart", C.k_ncclGroupStart(), nil) }
func ncclGroupEnd() error   { return ncclCheck("ncclGroupEnd", C.k_ncclGroupEnd(), nil) }
