// ------------------------------------------------------------ routing --

__device__ __forceinline__ int local_expert(int id, int rank, int elocal) {
    if (id < 0) return -1;
    int l = id - rank * elocal;
    return (l >= 0 && l < elocal) ? l : -1;
}

// The entries a thread takes at a time in kmoe_route_count and
// kmoe_route_scatter (consecutive, in entry order): one CTA an expert reads
// every entry, so each thread's loads were one at a time, each waited for,
// and the scatter met three barriers a 256 entries: several loads in
// flight a thread are what make the large prologue cheap.
#define ROUTE_PER 8

static_assert(ROUTE_PER == 8, "a group is two 16-byte loads");

// Whether entries i .. i + ROUTE_PER - 1 (those below n; i a multiple of
// ROUTE_PER) are routed to local expert e: bit q for entry i + q. ids is a
// device allocation (16-byte aligned), so a whole group is two 16-byte
// loads; past n an entry reads as -1, routed nowhere.
__device__ __forceinline__ void route_ids(const int* __restrict__ ids, int i, int n, int (&id)[ROUTE_PER]) {
    if (i + ROUTE_PER <= n) {
        const int4 lo = *(const int4*)&ids[i], hi = *(const int4*)&ids[i + 4];
        id[0] = lo.x, id[1] = lo.y, id[2] = lo.z, id[3] = lo.w, id[4] = hi.x, id[5] = hi.y, id[6] = hi.z, id[7] = hi.w;
    } else {
#pragma unroll
        for (int q = 0; q < ROUTE_PER; q++) id[q] = i + q < n ? ids[i + q] : -1;
    }
}

__device__ __forceinline__ u32 route_mine(const int* __restrict__ ids, int i, int n, int rank, int elocal, int e) {
    int id[ROUTE_PER];
    route_ids(ids, i, n, id);
    u32 mine = 0;
#pragma unroll
    for (int q = 0; q < ROUTE_PER; q++) mine |= (u32)(local_expert(id[q], rank, elocal) == e) << q;
    return mine;
}

// counts[e] = entries routed to local expert e. grid = E_local, block 256.
extern "C" __global__ void __launch_bounds__(KMOE_THREADS) kmoe_route_count(const RouteCountArgs a) {
    __shared__ int warpsum[KMOE_THREADS / 32];
    int e = blockIdx.x;
    int c = 0;
    for (int i = threadIdx.x * ROUTE_PER; i < a.n_entries; i += blockDim.x * ROUTE_PER)
        c += __popc(route_mine(a.ids, i, a.n_entries, a.rank, a.e_local, e));
    for (int o = 16; o > 0; o >>= 1) c += __shfl_xor_sync(0xFFFFFFFFu, c, o);
    if ((threadIdx.x & 31) == 0) warpsum[threadIdx.x >> 5] = c;
    __syncthreads();
    if (threadIdx.x == 0) {
        int t = 0;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) t += warpsum[w];
        a.counts[e] = t;
    }
}

// Stable expert-sorted permutation: CTA e writes, in entry order, the
// entries routed to expert e at rows offset[e]..; pos[entry] = row. Also
// tile_base[e] = sum over e' < e of ceil(count/TT), and tile_base[E] and
// offset[E] totals. grid = E_local, block 256 (8 warps), ROUTE_PER
// consecutive entries a thread at a time. route_scatter_expert is CTA e's
// part, given every expert's count (global or shared memory); the whole
// CTA calls it (kmoe_route_scatter, kmoe_route_x_many).
__device__ void route_scatter_expert(const int* __restrict__ ids, int nentries, int rank, int elocal, int e, int tt,
                                     const int* counts, int* __restrict__ offset, int* __restrict__ tile_base,
                                     int* __restrict__ perm, int* __restrict__ pos) {
    __shared__ int s_off, s_run;
    __shared__ int warpcnt[KMOE_THREADS / 32];
    if (threadIdx.x == 0) {
        int off = 0, tb = 0;
        for (int i = 0; i < e; i++) {
            off += counts[i];
            tb += (counts[i] + tt - 1) / tt;
        }
        offset[e] = off;
        tile_base[e] = tb;
        if (e == elocal - 1) {
            offset[elocal] = off + counts[e];
            tile_base[elocal] = tb + (counts[e] + tt - 1) / tt;
        }
        s_off = off;
        s_run = 0;
    }
    __syncthreads();
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int base = 0; base < nentries; base += blockDim.x * ROUTE_PER) {
        int i0 = base + threadIdx.x * ROUTE_PER;
        u32 mine = route_mine(ids, i0, nentries, rank, elocal, e);
        int c = __popc(mine), incl = c; // inclusive scan of c over the warp's lanes
        for (int o = 1; o < 32; o <<= 1) {
            int y = __shfl_up_sync(0xFFFFFFFFu, incl, o);
            if (lane >= o) incl += y;
        }
        if (lane == 31) warpcnt[warp] = incl;
        __syncthreads();
        int row = s_off + s_run + incl - c;
        for (int w = 0; w < warp; w++) row += warpcnt[w];
        for (; mine != 0u; mine &= mine - 1u) {
            int i = i0 + __ffs(mine) - 1;
            perm[row] = i;
            pos[i] = row++;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int t = 0;
            for (int w = 0; w < (int)(blockDim.x >> 5); w++) t += warpcnt[w];
            s_run += t;
        }
        __syncthreads();
    }
}

extern "C" __global__ void __launch_bounds__(KMOE_THREADS) kmoe_route_scatter(const RouteScatterArgs a) {
    route_scatter_expert(a.ids, a.n_entries, a.rank, a.e_local, blockIdx.x, a.tt, a.counts, a.offset, a.tile_base, a.perm,
                         a.pos);
}

// Routing in one CTA, for few entries (the decode prologue, and the BF16
// paths' up to abiRouteCTAMax entries): counts in shared memory
// (s_counts[elocal + 1]), offsets (the exclusive scan, offset[elocal] the
// total) and, where not null, the touched experts (touched[elocal] =
// their number) and the token tiles (tile_base[e] = sum over e' < e of
// ceil(count / tt), tile_base[elocal] the total: kmoe_route_scatter's);
// then the stable scatter in entry order, one warp, 32 entries a step:
// pos[i] = the row of entry i (-1: not local), perm[row] = i.
__device__ void route_cta(const int* __restrict__ ids, int n, int rank, int elocal, int* s_counts, int* pos, int* perm,
                          int* offset, int* touched, int* tile_base, int tt) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int e = threadIdx.x; e <= elocal; e += blockDim.x) s_counts[e] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        int e = local_expert(ids[i], rank, elocal);
        if (e >= 0) atomicAdd(&s_counts[e], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) { // offsets (exclusive scan), the touched list, the tiles
        int off = 0, nt = 0, tb = 0;
        for (int e = 0; e < elocal; e++) {
            int c = s_counts[e];
            offset[e] = off;
            if (touched && c > 0) touched[nt++] = e;
            if (tile_base) {
                tile_base[e] = tb;
                tb += (c + tt - 1) / tt;
            }
            s_counts[e] = off; // from here on: the next free row of e
            off += c;
        }
        offset[elocal] = off;
        if (touched) touched[elocal] = nt;
        if (tile_base) tile_base[elocal] = tb;
    }
    __syncthreads();
    if (warp == 0) { // stable scatter in entry order, 32 entries a step
        for (int base = 0; base < n; base += 32) {
            int i = base + lane;
            int e = i < n ? local_expert(ids[i], rank, elocal) : -1;
            u32 peers = __match_any_sync(0xFFFFFFFFu, e);
            int before = __popc(peers & ((1u << lane) - 1u));
            int row = e >= 0 ? s_counts[e] + before : -1;
            __syncwarp();
            if (e >= 0 && before == __popc(peers) - 1) s_counts[e] += __popc(peers);
            __syncwarp();
            if (i < n) {
                pos[i] = row;
                if (row >= 0) perm[row] = i;
            }
        }
    }
}

// The expert whose range base[e] .. base[e + 1] - 1 holds j: of token
// tile j with base tile_base, of routed row j with base offset. The last
// e with base[e] <= j, so an empty expert (its base equal to the next
// one's) is passed over.
__device__ __forceinline__ int expert_of(const int* base, int elocal, int j) {
    int lo = 0, hi = elocal - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (base[mid] <= j) lo = mid; else hi = mid - 1;
    }
    return lo;
}
