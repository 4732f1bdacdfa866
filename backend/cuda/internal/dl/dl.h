// The cgo half of package dl, shared by the loaders of the CUDA driver,
// NVRTC and NCCL: dlopen's failure and dlsym into a table of function
// pointers, each reporting why in the loader's own buffer `why` (a char
// array), as "missing symbol NAME" or dlerror's text. Include it after
// <dlfcn.h> and <stdio.h>; `h` is the handle being loaded.
#ifndef KMOE_DL_H
#define KMOE_DL_H

// A symbol was not found: say which, close h, return the reason.
#define KMOE_DL_MISSING(why, name) do { snprintf(why, sizeof why, "missing symbol %s", name); dlclose(h); return why; } while (0)

// t.field = the symbol name of h, or return KMOE_DL_MISSING.
#define KMOE_DL_SYM(why, t, field, name) do { *(void**)(&t.field) = dlsym(h, name); \
	if (!t.field) KMOE_DL_MISSING(why, name); } while (0)

// dlopen failed: its message (or a fixed one) into why, which is returned.
static inline const char* kmoe_dl_open_failed(char* why, size_t n) {
	const char* e = dlerror();
	snprintf(why, n, "%s", e ? e : "dlopen failed");
	return why;
}

#endif
