# Helper: capture a function into a CUDA graph after warm-ups (shared by the probes that time graph replays).
# capture(fn, warmups): fn run warmups times on a side stream (as torch's
# graph capture asks: allocations and lazy initialisation done before
# capture), then captured into a CUDA graph, which is returned. Shared by
# the device scripts that time graph replays (graph_floor.py,
# gemm_ceiling.py).
import torch


def capture(fn, warmups):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warmups):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g
