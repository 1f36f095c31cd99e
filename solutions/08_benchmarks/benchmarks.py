"""Exercise 08: benchmarks. Measure what FlashAttention buys, honestly, and draw it.

    attention_flops(B, H, N, d, causal=False, mode="fwd")          FLOPs of one call (course convention)
    attention_memory(B, H, N, d, element_size, method)              bytes one forward needs beyond its inputs
    naive_attention(q, k, v, causal=False, sm_scale=None)           the plain PyTorch baseline
    measure(fn, flops=None, warmup=10, repeats=30, device=None)     time and peak memory of fn()
    sweep(methods, sizes, B, H, d, causal, dtype, device, log)      measure every method at every N
    plot(results, path)                                             the three-panel figure, as a PNG

Results are plain data (dicts of numbers and strings), so they can be printed, saved as CSV or
JSON, and sent between processes. `measure` talks to the GPU only through `device` (CudaDevice
below by default): the grader hands it a simulated GPU to check its logic on a CPU.
"""

import functools
import statistics
import time

import torch
from matplotlib.figure import Figure

from common.env import versions

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
MIB = 2**20


# ----------------------------------------------------------------------------- the device measure() uses
class CudaDevice:
    """Everything measure() needs from the GPU, in one place.

    sync()         wait until every kernel queued so far has finished
    clock()        the host's clock, in seconds
    flush_cache()  queue a kernel that overwrites the whole L2 cache (a 256 MiB buffer)
    allocated()    bytes of GPU memory held by tensors now
    reset_peak()   restart the peak counter from what is allocated now
    peak()         the most bytes held at any moment since the last reset_peak()
    """

    FLUSH_BYTES = 256 * MIB  # several times any GPU's L2 cache (50 MB on an H100 or H200)

    def __init__(self):
        self.name = torch.cuda.get_device_name()
        self.torch_device = "cuda"
        self.scratch = torch.empty(self.FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")

    def sync(self):
        torch.cuda.synchronize()

    def clock(self):
        return time.perf_counter()

    def flush_cache(self):
        self.scratch.zero_()

    def allocated(self):
        return torch.cuda.memory_allocated()

    def reset_peak(self):
        torch.cuda.reset_peak_memory_stats()

    def peak(self):
        return torch.cuda.max_memory_allocated()


@functools.cache
def cuda_device():
    """One CudaDevice per process (its flush buffer is allocated once)."""
    return CudaDevice()


# ----------------------------------------------------------------------------- what to expect
def attention_flops(B, H, N, d, causal=False, mode="fwd"):
    """FLOPs of one attention call, the course's convention (the FlashAttention papers' too):

      fwd      two matmuls per head, S = Q K^T and O = P V, each 2 * N * N * d: 4 * B * H * N^2 * d;
      bwd      five matmuls (S again, dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q): 2.5 x fwd;
      fwd+bwd  a training step's attention: 3.5 x fwd.
    Causal attention skips the keys j > i: half the work (N^2 / 2, ignoring the diagonal).
    The softmax's exponentials are not counted: they do not run on the tensor cores.
    """
    ### BEGIN SOLUTION
    forward = 4.0 * B * H * N * N * d
    if causal:
        forward /= 2
    return forward * {"fwd": 1.0, "bwd": 2.5, "fwd+bwd": 3.5}[mode]
    ### END SOLUTION


def attention_memory(B, H, N, d, element_size, method):
    """Bytes of GPU memory one forward call allocates beyond its inputs q, k, v, at its peak.

      "naive": S and P, both [B, H, N, N] in the inputs' dtype and alive together while the softmax
               writes P, then O [B, H, N, d] while P @ V runs: B * H * (2 * N^2 + N * d) elements;
      "flash": O [B, H, N, d] and lse [B, H, N] in float32 (4 bytes): nothing N x N.
    element_size: bytes per element of q (2 for fp16 and bf16, 4 for fp32).
    """
    ### BEGIN SOLUTION
    if method == "naive":
        return B * H * (2 * N * N + N * d) * element_size
    if method == "flash":
        return B * H * N * (d * element_size + 4)
    raise ValueError(f"method must be 'naive' or 'flash', not {method!r}")
    ### END SOLUTION


# ----------------------------------------------------------------------------- the baseline
def naive_attention(q, k, v, causal=False, sm_scale=None):
    """softmax(q k^T * sm_scale) v in three PyTorch steps, each writing its full result to memory.

    q, k, v: [B, H, N, d]; sm_scale defaults to 1/sqrt(d); causal hides keys j > i. Returns o in
    q's dtype. The scores S and the probabilities P are [B, H, N, N] tensors: this is the N x N
    memory FlashAttention avoids, and the memory wall of the benchmark.
      1. S = (q * sm_scale) @ k^T   (scale q, N x d, rather than S, N x N: one N x N tensor less);
      2. causal: set S[..., i, j] = -inf for j > i, in place;
      3. P = softmax(S) along the keys;  4. o = P @ v.
    """
    ### BEGIN SOLUTION
    N, d = q.shape[-2], q.shape[-1]
    sm_scale = d**-0.5 if sm_scale is None else sm_scale
    s = (q * sm_scale) @ k.transpose(-2, -1)
    if causal:
        future = torch.ones(N, N, dtype=torch.bool, device=q.device).triu(1)
        s.masked_fill_(future, float("-inf"))
    p = torch.softmax(s, dim=-1)
    return p @ v
    ### END SOLUTION


# ----------------------------------------------------------------------------- measuring one thing
def measure(fn, flops=None, warmup=10, repeats=30, device=None):
    """Time fn() and read the memory it needs. Returns plain data:

        {"ms": median milliseconds of one call, "tflops": flops per second / 1e12 (None without
         flops), "peak_mib": MiB allocated during one call beyond what was held before it,
         "status": "ok"}
    and, when fn runs out of GPU memory (torch.OutOfMemoryError), the result
        {"ms": None, "tflops": None, "peak_mib": None, "status": "OOM"}.

    Use only `device` (cuda_device() when None) to wait, read the clock and the memory:
      1. warm-up: call fn() `warmup` times (compiling, autotuning, clocks ramping up, the
         allocator filling its cache all happen here, not in the numbers); device.sync();
      2. memory, on one call: baseline = device.allocated(); device.reset_peak(); fn();
         device.sync(); peak_mib = (device.peak() - baseline) / 2**20;
      3. time, `repeats` times: device.flush_cache() (cold L2, as in a real model), device.sync()
         (so the clock does not start while the flush still runs), start = device.clock(), fn(),
         device.sync() (launches return at once: wait for the kernel itself), then the time in ms;
      4. ms = the median of those times (robust to the outliers of a shared, boosting GPU).
    """
    ### BEGIN SOLUTION
    device = cuda_device() if device is None else device
    try:
        for _ in range(warmup):
            fn()
        device.sync()

        baseline = device.allocated()
        device.reset_peak()
        fn()
        device.sync()
        peak_mib = (device.peak() - baseline) / MIB

        times_ms = []
        for _ in range(repeats):
            device.flush_cache()
            device.sync()
            start = device.clock()
            fn()
            device.sync()
            times_ms.append((device.clock() - start) * 1e3)
    except torch.OutOfMemoryError:
        return {"ms": None, "tflops": None, "peak_mib": None, "status": "OOM"}
    ms = statistics.median(times_ms)
    tflops = flops / (ms * 1e-3) / 1e12 if flops else None
    return {"ms": ms, "tflops": tflops, "peak_mib": peak_mib, "status": "ok"}
    ### END SOLUTION


# ----------------------------------------------------------------------------- measuring everything
def sweep(methods, sizes, B=4, H=32, d=64, causal=(False, True), dtype="float16", device=None, log=print):
    """Measure every method at every sequence length; returns one result row (a dict) per
    (causal flag, N, method), in that order.

    methods: {name: (mode, make)}: mode is "fwd" or "fwd+bwd"; make(q, k, v, causal) returns
             (fn, label): fn() runs the method once on those inputs, label names what ran (the
             backend SDPA chose, "triton", ...).
    sizes: the values of N, smallest first. dtype: a key of DTYPES. log: prints progress (None: quiet).

    For each causal flag and each N: draw q, k, v once ([B, H, N, d], on device.torch_device)
    and give the same tensors to every method (a fair race); for each method, count its FLOPs
    with attention_flops (its mode), measure it, and make the row: the result of measure plus
    "method", "mode", "label", "B", "H", "N", "d", "causal", "dtype" and "device" (device.name).
    A method that ran out of memory at some N is not run again at a larger N with the same causal
    flag: its row there is the OOM result without running anything. Free the inputs (and empty
    PyTorch's cache, torch.cuda.empty_cache()) before the next N, so one size's leftovers do not
    count against the next.
    """
    ### BEGIN SOLUTION
    device = cuda_device() if device is None else device
    rows, total = [], len(causal) * len(sizes) * len(methods)
    for is_causal in causal:
        out_of_memory = set()
        for N in sorted(sizes):
            q, k, v = (torch.randn(B, H, N, d, dtype=DTYPES[dtype], device=device.torch_device) for _ in range(3))
            for name, (mode, make) in methods.items():
                config = {"method": name, "mode": mode, "label": "", "B": B, "H": H, "N": N, "d": d,
                          "causal": is_causal, "dtype": dtype, "device": device.name}
                if name in out_of_memory:
                    result = {"ms": None, "tflops": None, "peak_mib": None, "status": "OOM"}
                else:
                    fn, config["label"] = make(q, k, v, is_causal)
                    result = measure(fn, attention_flops(B, H, N, d, is_causal, mode), device=device)
                    del fn
                if result["status"] == "OOM":
                    out_of_memory.add(name)
                rows.append(config | result)
                if log is not None:
                    log(progress_line(len(rows), total, rows[-1]))
            del q, k, v
            torch.cuda.empty_cache()
    return rows
    ### END SOLUTION


def progress_line(i, total, row):
    """'[ 7/48] naive fwd N=2048 causal: 1.234 ms, 112.3 TFLOPS, 1024 MiB' for one result row."""
    what = f"[{i:>{len(str(total))}}/{total}] {row['method']} {row['mode']} N={row['N']}"
    what += " causal" if row["causal"] else ""
    if row["status"] != "ok":
        return f"{what}: {row['status']}"
    tflops = f", {row['tflops']:.1f} TFLOPS" if row["tflops"] is not None else ""
    return f"{what}: {row['ms']:.3f} ms{tflops}, {row['peak_mib']:.0f} MiB"


# ----------------------------------------------------------------------------- drawing it
PANELS = [  # (result field, y label with its unit, y scale)
    ("ms", "latency per call (ms)", "log"),
    ("tflops", "throughput (TFLOP/s)", "linear"),
    ("peak_mib", "peak extra memory (MiB)", "log"),
]


def plot(results, path):
    """Draw results (rows of sweep) as one figure of three panels side by side, against N:
    latency, throughput and peak extra memory; save it as a PNG at `path` and return
    figure_summary(fig).

    - one line per (method, mode), labelled "<method> <mode>": one colour per method in every
      panel, solid for "fwd", dashed for "fwd+bwd"; only the rows whose status is "ok" are points;
    - a method that ran out of memory gets the text "OOM" at the first N where it did, at the
      height where its line stops, in the latency and memory panels;
    - x axis: "sequence length N", log scale base 2 (the sizes double); y: the label and scale of
      PANELS (log where the values span decades);
    - the title names the GPU (the rows' "device"), the configuration (B, H, d, dtype, causal or
      not) and the versions (common.env.versions()), so a figure never loses how it was made.
    Rows of several configurations (causal and not, ...) are drawn together: pass one at a time.
    """
    ### BEGIN SOLUTION
    fig = Figure(figsize=(16, 4.8), layout="constrained")
    axes = fig.subplots(1, len(PANELS))
    series = {}
    for row in results:
        series.setdefault((row["method"], row["mode"]), []).append(row)
    colours = {}
    for (method, mode), rows in series.items():
        rows = sorted(rows, key=lambda r: r["N"])
        done = [r for r in rows if r["status"] == "ok"]
        colour = colours.setdefault(method, f"C{len(colours) % 10}")  # matplotlib's default colours
        for ax, (field, _, _) in zip(axes, PANELS):
            ax.plot([r["N"] for r in done], [r[field] for r in done], marker="o", color=colour,
                    linestyle="-" if mode == "fwd" else "--", label=f"{method} {mode}")
        failed = [r for r in rows if r["status"] == "OOM"]
        if failed and done:  # where the line stops: the memory wall
            for ax, field in ((axes[0], PANELS[0][0]), (axes[-1], PANELS[-1][0])):
                ax.annotate("OOM", (failed[0]["N"], done[-1][field]), color=colour, ha="center")
    sizes = sorted({r["N"] for r in results})
    for ax, (_, ylabel, yscale) in zip(axes, PANELS):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, labels=[str(n) for n in sizes])
        ax.minorticks_off()
        ax.set_yscale(yscale)
        ax.set_xlabel("sequence length N")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize="small")
    first = results[0]
    config = (f"B={first['B']} H={first['H']} d={first['d']} {first['dtype']}, "
              f"{'causal' if first['causal'] else 'non-causal'}")
    fig.suptitle(f"{first['device']}: {config}\n{versions()}")
    fig.savefig(path, format="png", dpi=110)
    return figure_summary(fig)
    ### END SOLUTION


def figure_summary(fig):
    """What a matplotlib figure shows, as plain data: its title, and for each panel the labels,
    scales, texts and lines (label, x and y values). The grader reads this; the PNG is for you."""
    def lines(ax):
        return [{"label": str(line.get_label()), "x": [float(x) for x in line.get_xdata()],
                 "y": [float(y) for y in line.get_ydata()]} for line in ax.get_lines()]

    return {
        "title": fig.get_suptitle(),
        "axes": [{"xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(), "title": ax.get_title(),
                  "xscale": ax.get_xscale(), "yscale": ax.get_yscale(), "lines": lines(ax),
                  "texts": [t.get_text() for t in ax.texts]} for ax in fig.axes],
    }
