//go:build cgo

package nccl

/*
#cgo LDFLAGS: -ldl
#cgo CFLAGS: -I${SRCDIR}/../dl
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include "dl.h"

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

#define NSYM(t, field, name) KMOE_DL_SYM(kmoe_nccl_why, t, field, name)

// kmoe_load_nccl opens NCCL and resolves its symbols into a local table,
// published only when complete; NULL on success (or if already loaded).
static const char* kmoe_load_nccl(const char* path) {
	if (nc.lib) return NULL;
	void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) return kmoe_dl_open_failed(kmoe_nccl_why, sizeof kmoe_nccl_why);
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
	"unsafe"

	"kimimoe/backend/cuda/internal/cu"
	"kimimoe/backend/cuda/internal/dl"
)

// NCCL data types (nccl.h's ncclDataType_t).
const (
	Uint8   = 1
	Int32   = 2
	Float32 = 7
)

const inProgress = 7 // ncclResult_t: a non-blocking call is still running

// Comm is a communicator.
type Comm = C.ncclComm_t

func check(call string, r C.ncclResult_t, c Comm) error {
	if r == 0 {
		return nil
	}
	e := &Error{Call: call, Code: int(r), Name: C.GoString(C.k_ncclErrorString(r))}
	if c != nil {
		e.Detail = C.GoString(C.k_ncclLastError(c))
	}
	return e
}

func load(path string) (why string) {
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	if bad := C.kmoe_load_nccl(cs); bad != nil {
		return C.GoString(bad)
	}
	return ""
}

func Version() (int, error) {
	var v C.int
	err := check("ncclGetVersion", C.k_ncclGetVersion(&v), nil)
	return int(v), err
}

func GetUniqueID() ([128]byte, error) {
	var id [128]byte
	err := check("ncclGetUniqueId", C.k_ncclGetUniqueId(unsafe.Pointer(&id[0])), nil)
	return id, err
}

func CommInitRank(id [128]byte, size, rank int) (Comm, error) {
	var c Comm
	err := check("ncclCommInitRank", C.k_ncclCommInitRank(&c, C.int(size), unsafe.Pointer(&id[0]), C.int(rank)), nil)
	return c, err
}

func CommInitAll(devices []int) ([]Comm, error) {
	comms := make([]Comm, len(devices))
	devs := make([]C.int, len(devices))
	for i, d := range devices {
		devs[i] = C.int(d)
	}
	err := check("ncclCommInitAll", C.k_ncclCommInitAll(&comms[0], C.int(len(devices)), &devs[0]), nil)
	return comms, err
}

func CommDestroy(c Comm) error {
	return check("ncclCommDestroy", C.k_ncclCommDestroy(c), nil)
}
func CommAbort(c Comm) error { return check("ncclCommAbort", C.k_ncclCommAbort(c), nil) }

// AsyncError is the communicator's asynchronous error (nil: none).
func AsyncError(c Comm) error {
	var r C.ncclResult_t
	if err := check("ncclCommGetAsyncError", C.k_ncclCommGetAsyncError(c, &r), c); err != nil {
		return err
	}
	if r == 0 || r == inProgress {
		return nil
	}
	return check("NCCL (asynchronous)", r, c)
}

func AllReduceSum(src, dst cu.Ptr, n int, c Comm, s cu.Stream) error {
	return check("ncclAllReduce", C.k_ncclAllReduceSumF32(C.ulonglong(src), C.ulonglong(dst), C.size_t(n), c, C.kmoe_stream(unsafe.Pointer(s))), c)
}

func AllGather(src, dst cu.Ptr, n, dtype int, c Comm, s cu.Stream) error {
	return check("ncclAllGather", C.k_ncclAllGather(C.ulonglong(src), C.ulonglong(dst), C.size_t(n), C.int(dtype), c, C.kmoe_stream(unsafe.Pointer(s))), c)
}

func Send(src cu.Ptr, n, dtype, peer int, c Comm, s cu.Stream) error {
	return check("ncclSend", C.k_ncclSend(C.ulonglong(src), C.size_t(n), C.int(dtype), C.int(peer), c, C.kmoe_stream(unsafe.Pointer(s))), c)
}

func Recv(dst cu.Ptr, n, dtype, peer int, c Comm, s cu.Stream) error {
	return check("ncclRecv", C.k_ncclRecv(C.ulonglong(dst), C.size_t(n), C.int(dtype), C.int(peer), c, C.kmoe_stream(unsafe.Pointer(s))), c)
}

func GroupStart() error { return check("ncclGroupStart", C.k_ncclGroupStart(), nil) }
func GroupEnd() error   { return check("ncclGroupEnd", C.k_ncclGroupEnd(), nil) }

var lib = dl.Library{Name: "NCCL", Env: "KIMIMOE_LIBNCCL", Load: load, Missing: ErrNoNCCL,
	Defaults: func() []string { return []string{"libnccl.so.2", "libnccl.so"} }}

// Load opens NCCL ($KIMIMOE_LIBNCCL, else libnccl.so.2), once per process.
func Load() error { return lib.Open() }

// Loaded reports whether this process has loaded NCCL.
func Loaded() bool { return lib.Loaded() }
