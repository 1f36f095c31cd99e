"""`python -m grader.bench`: what FlashAttention buys, measured on a GPU and drawn.

Runs exercise 08's sweep (the instructor's code by default, yours with --code exercises) over N
for naive PyTorch attention, PyTorch's SDPA (its default choice, and backends pinned one at a
time) and a course's own kernels (exercise 04's forward, exercise 07's forward + backward, from
--target). Prints a table with ratios to SDPA, and writes to --out one three-panel PNG per
configuration (latency, TFLOPS, peak extra memory against N), bench.csv and bench.json.

    python -m grader.bench --target solutions                      # B4 H32 d64 fp16, N 512..16384
    python -m grader.bench --target exercises --shape 4,16,128 --sizes 1024,4096
    python -m grader.bench --target solutions --sizes 512,1024,2048 --graphs   # without launch costs
    python -m grader.bench --sizes 1024,2048 --no-autograd-threads  # backward on the calling thread
    python -m grader.bench --simulate                              # anywhere: a simulated GPU

FLOPs: forward 4*B*H*N^2*d, halved when causal; backward 2.5x the forward; fwd+bwd 3.5x.
Time: median of the timed calls after warm-up, L2 cache flushed before each, synchronised.
Memory: the most GPU memory allocated during one call, minus what was allocated before it.
"""

import argparse
import csv
import json
import math
import sys
import time
from pathlib import Path

from common import env
from grader import ROOT

SIZES = (512, 1024, 2048, 4096, 8192, 16384)
METHODS = ("naive", "sdpa", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn", "course")
DEFAULT_METHODS = ("naive", "sdpa", "sdpa-flash", "course")
WARMUP_BEFORE_CAPTURE = 3  # calls before a CUDA graph is captured (--graphs)
MODES = ("fwd", "fwd+bwd")
CONVENTIONS = {
    "flops": "forward 4*B*H*N^2*d, halved when causal; backward 2.5x the forward; fwd+bwd 3.5x the forward",
    "time": "median of the timed calls after the warm-up calls; L2 cache flushed and GPU synchronised before "
    "each call, synchronised after it",
    "memory": "peak GPU memory allocated during one call (after warm-up) minus what was allocated before it "
    "(inputs excluded)",
}
NO_AUTOGRAD_THREADS_CONVENTION = (
    "--no-autograd-threads: every method's backward runs on the calling thread "
    "(torch.autograd.set_multithreading_enabled(False)), not on PyTorch's thread for the GPU"
)
GRAPHS_CONVENTION = (
    "--graphs: each call replays a CUDA graph of the method, captured after warm-up, for every method alike: "
    "the host's launch cost is left out; memory is that of the captured call"
)
SDPA_BACKENDS = {
    "sdpa-flash": "FLASH_ATTENTION",
    "sdpa-efficient": "EFFICIENT_ATTENTION",
    "sdpa-cudnn": "CUDNN_ATTENTION",
}


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m grader.bench",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    p.add_argument("--target", default="solutions", help="course folder whose 04 and 07 kernels are timed")
    p.add_argument("--code", default="solutions", help="course folder whose 08_benchmarks code runs the sweep")
    p.add_argument(
        "--shape", action="append", metavar="B,H,d", help="batch, heads, head dim (repeatable); default 4,32,64"
    )
    p.add_argument("--sizes", default=",".join(map(str, SIZES)), help="the values of N, comma-separated")
    p.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    p.add_argument("--dtype", choices=("float16", "bfloat16"), default="float16")
    p.add_argument(
        "--methods",
        default=",".join(DEFAULT_METHODS),
        help=f"comma-separated, of: {', '.join(METHODS)} (default: %(default)s)",
    )
    p.add_argument(
        "--graphs",
        action="store_true",
        help="time every method as a CUDA graph replay (captured after warm-up): the GPU's work without the "
        "host's launch cost, which dominates short sequences",
    )
    p.add_argument(
        "--no-autograd-threads",
        action="store_true",
        help="run every backward on the calling thread, as torch.autograd.set_multithreading_enabled(False) "
        "does: PyTorch hands a backward to a thread of its own per GPU, which a Python autograd "
        "Function (the course's) pays for in every step",
    )
    p.add_argument("--modes", default=",".join(MODES), help="fwd, fwd+bwd or both (default: %(default)s)")
    p.add_argument("--out", default="results/bench", help="folder for the PNGs, bench.csv and bench.json")
    p.add_argument(
        "--simulate",
        action="store_true",
        help="run on a simulated GPU (numbers from a model, not a measurement): to see the output anywhere",
    )
    args = p.parse_args(argv)
    args.shapes = [tuple(int(x) for x in s.split(",")) for s in (args.shape or ["4,32,64"])]
    args.sizes = sorted(int(n) for n in args.sizes.split(","))
    args.methods = [m for m in args.methods.split(",") if m]
    args.modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in args.methods if m not in METHODS] + [m for m in args.modes if m not in MODES]
    if unknown or any(len(s) != 3 for s in args.shapes):
        p.error(f"unknown method or mode {unknown}" if unknown else "--shape takes B,H,d (three integers)")
    args.causal_flags = {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]
    return args


def course_folder(name: str) -> Path:
    path = Path(name) if Path(name).exists() else ROOT / name
    if not path.is_dir():
        raise SystemExit(f"error: {name!r} is not a course folder (try 'solutions' or 'exercises')")
    return path.resolve()


# ----------------------------------------------------------------------------- the methods, on a GPU
def _forward(attention, label):
    """make(q, k, v, causal) for a forward-only method attention(q, k, v, causal)."""

    def make(q, k, v, causal):
        return (lambda: attention(q, k, v, causal)), label(q, k, v, causal) if callable(label) else label

    return make


def _forward_backward(attention, label):
    """make(q, k, v, causal) for a training step: attention forward, then backward from a fixed dO."""
    import torch

    def make(q, k, v, causal):
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        do = torch.randn_like(q)

        def step():
            for t in leaves:
                t.grad = None
            attention(*leaves, causal).backward(do)

        return step, label(*leaves, causal) if callable(label) else label

    return make


def _sdpa(backend_name):
    """attention(q, k, v, causal) through torch SDPA: its default choice (None) or one pinned backend."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    def attention(q, k, v, causal):
        if backend_name is None:
            return scaled_dot_product_attention(q, k, v, is_causal=causal)
        with sdpa_kernel(getattr(SDPBackend, backend_name)):
            return scaled_dot_product_attention(q, k, v, is_causal=causal)

    return attention


def capture(fn):
    """A CUDA graph of one call of fn, recorded after warm-up calls on a side stream (compiling,
    autotuning and the allocator's first requests happen there, not in the graph), and the peak
    extra GPU memory, in MiB, of one call made as the graph makes it."""
    import torch

    from common.harness import PeakMemory

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(WARMUP_BEFORE_CAPTURE):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    memory = PeakMemory.start()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph, memory.extra() / 2**20


def graphed(make, peaks, capture=capture):
    """make(q, k, v, causal) for the same method run as a CUDA graph: the first call captures one
    call of it (see capture), every call replays the graph. A replay costs the host a few µs however
    many kernels the graph holds, so this times the GPU's work without the Python launch path.
    A replay allocates nothing: the peak memory of the captured call goes to peaks[(N, causal)],
    for the caller to put in the row instead of the replay's."""

    def make_graphed(q, k, v, causal):
        fn, label = make(q, k, v, causal)
        graph = None

        def replay():
            nonlocal graph
            if graph is None:
                graph, peaks[(q.shape[2], causal)] = capture(fn)
            graph.replay()

        return replay, f"{label}, CUDA graph"

    return make_graphed


def simulated_capture(fn):
    """capture() on the simulated GPU: its model has no launch cost, so the "graph" calls fn."""
    import types

    return types.SimpleNamespace(replay=fn), None


def with_captured_peaks(rows, peaks):
    """The rows of a sweep, each with the peak memory of its captured call where graphed() recorded one."""
    for row in rows:
        peak = peaks.get(row["method"], {}).get((row["N"], row["causal"]))
        if peak is not None and row["status"] == "ok":
            row["peak_mib"] = peak
    return rows


def sdpa_choice(q, k, v, causal) -> str:
    """The backend SDPA's default dispatch picks for these inputs ("CUDNN_ATTENTION", ...)."""
    import torch
    from torch.nn.attention import SDPBackend

    return SDPBackend(torch._fused_sdp_choice(q, k, v, None, 0.0, causal)).name


def gpu_methods(names, mode, code, target) -> dict:
    """{name: (mode, make)} for exercise 08's sweep, on the GPU."""
    from common.loader import load_module

    wrap = _forward if mode == "fwd" else _forward_backward
    methods = {}
    for name in names:
        if name == "naive":
            methods[name] = (mode, wrap(code.naive_attention, "PyTorch ops"))
        elif name == "sdpa":
            methods[name] = (mode, wrap(_sdpa(None), sdpa_choice))
        elif name in SDPA_BACKENDS:
            methods[name] = (mode, wrap(_sdpa(SDPA_BACKENDS[name]), SDPA_BACKENDS[name]))
        elif name == "course" and mode == "fwd":
            forward = load_module(target / "04_flash_forward" / "flash_forward.py").flash_attention_forward
            methods[name] = (
                mode,
                wrap(lambda q, k, v, causal, forward=forward: forward(q, k, v, causal)[0], "triton (04)"),
            )
        elif name == "course":
            attention = load_module(target / "07_backward_dq" / "backward_dq.py").flash_attention
            methods[name] = (mode, wrap(attention, "triton (04-07)"))
    return methods


def supported(methods, B, H, d, dtype, causal) -> tuple:
    """(methods that run this configuration, notes on those that cannot), tried once at N = 256."""
    import torch

    q, k, v = (torch.randn(B, H, 256, d, dtype=dtype, device="cuda") for _ in range(3))
    kept, notes = {}, []
    for name, (mode, make) in methods.items():
        try:
            fn, _ = make(q, k, v, causal)
            fn()
            kept[name] = (mode, make)
        except RuntimeError as exc:  # e.g. a pinned SDPA backend without a kernel for this dtype or d
            notes.append(f"{name} {mode}: not run for this configuration ({str(exc).strip().splitlines()[0][:120]})")
    torch.cuda.synchronize()
    return kept, notes


# ----------------------------------------------------------------------------- the methods, simulated
def simulated_methods(names, mode, B, H, d, dtype, world) -> dict:
    """A model of an H200 (numbers of GPU_RESULTS.md and the lessons), for --simulate."""
    from common import fixtures

    gib = 130.0 * 1024  # MiB a method may hold before it runs out of memory
    naive_mib = B * H * 4 * 4096 / 2**20 * (2 if mode == "fwd+bwd" else 1)  # per (N / 64)^2, fp16 S and P
    oom = next((n for n in (2**i for i in range(9, 20)) if naive_mib * (n / 64) ** 2 > gib), None)
    fused_mib = B * H * (d * 2 + 4) / 2**20 * (1 if mode == "fwd" else 4)  # per key: o, lse (+ dq, dk, dv)
    model = {
        "naive": {
            "tflops": 45.0,
            "label": "PyTorch ops (simulated)",
            "mib_per_key": naive_mib,
            "quadratic": True,
            "oom_from": oom,
        },
        "sdpa": {
            "tflops": 440.0 if mode == "fwd" else 435.0,
            "label": "CUDNN_ATTENTION (simulated)",
            "mib_per_key": fused_mib,
        },
        "sdpa-flash": {
            "tflops": 300.0 if mode == "fwd" else 280.0,
            "label": "FLASH_ATTENTION (simulated)",
            "mib_per_key": fused_mib,
        },
        "sdpa-efficient": {"tflops": 200.0, "label": "EFFICIENT_ATTENTION (simulated)", "mib_per_key": fused_mib},
        "sdpa-cudnn": {"tflops": 440.0, "label": "CUDNN_ATTENTION (simulated)", "mib_per_key": fused_mib},
        "course": {
            "tflops": 400.0 if mode == "fwd" else 330.0,
            "label": "triton (simulated)",
            "mib_per_key": fused_mib,
        },
    }
    spec = {name: model[name] | {"mode": mode} for name in names}
    return fixtures.fake_methods(world, B, H, d, dtype, spec)


# ----------------------------------------------------------------------------- reporting
def table(rows) -> str:
    """The rows of one configuration as a text table, each with its speed relative to SDPA's default."""
    sdpa = {(r["mode"], r["N"]): r["ms"] for r in rows if r["method"] == "sdpa" and r["status"] == "ok"}
    lines = [f"{'N':>6}  {'method':<15} {'mode':<8} {'ran':<28} {'ms':>9} {'TFLOPS':>7} {'peak MiB':>9} {'vs SDPA':>8}"]
    for r in sorted(rows, key=lambda r: (r["N"], MODES.index(r["mode"]))):  # methods in the order given
        head = f"{r['N']:>6}  {r['method']:<15} {r['mode']:<8} {str(r['label'])[:28]:<28}"
        if r["status"] != "ok":
            lines.append(f"{head} {r['status']:>9}")
            continue
        base = sdpa.get((r["mode"], r["N"]))
        ratio = f"{base / r['ms']:.2f}x" if base else "-"
        lines.append(f"{head} {r['ms']:>9.3f} {r['tflops']:>7.1f} {r['peak_mib']:>9.1f} {ratio:>8}")
    return "\n".join(lines)


def config_name(B, H, d, dtype, causal) -> str:
    return f"bench_B{B}_H{H}_d{d}_{dtype}_{'causal' if causal else 'noncausal'}"


def write_outputs(out: Path, rows, meta) -> None:
    out.mkdir(parents=True, exist_ok=True)
    fields = list(rows[0]) if rows else []
    with open(out / "bench.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    (out / "bench.json").write_text(json.dumps(meta | {"rows": rows}, indent=1, default=_plain))


def _plain(value):
    return None if isinstance(value, float) and not math.isfinite(value) else str(value)


# ----------------------------------------------------------------------------- main
def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    mode = env.setup()
    if not mode.gpu and not args.simulate:
        print(
            "the benchmark needs a CUDA GPU (the interpreter checks correctness, not speed); "
            "`python -m grader.bench --simulate` shows its output on a simulated one",
            file=sys.stderr,
        )
        return 2
    import torch

    with torch.autograd.set_multithreading_enabled(not args.no_autograd_threads):  # this thread only
        return run(args, mode)


def run(args, mode) -> int:
    from common import fixtures
    from common.loader import load_module

    code = load_module(course_folder(args.code) / "08_benchmarks" / "benchmarks.py")
    target = course_folder(args.target)
    out = Path(args.out)
    gpu = "simulated GPU (numbers from a model, not measured)" if args.simulate else mode.description
    print(f"{gpu}; {env.versions()}\ncourse kernels from {target}; benchmark code from {code.__file__}")
    conventions = (
        CONVENTIONS
        | ({"graphs": GRAPHS_CONVENTION} if args.graphs else {})
        | ({"autograd": NO_AUTOGRAD_THREADS_CONVENTION} if args.no_autograd_threads else {})
    )
    for key, text in conventions.items():
        print(f"  {key}: {text}")
    all_rows, pictures, start = [], [], time.monotonic()
    for B, H, d in args.shapes:
        for causal in args.causal_flags:
            rows, notes = [], []
            for step in args.modes:
                if args.simulate:
                    world = f"bench-{B}-{H}-{d}-{causal}-{step}"
                    methods = simulated_methods(args.methods, step, B, H, d, args.dtype, world)
                    device = fixtures.fake_gpu(world)
                else:
                    import torch

                    methods, device = gpu_methods(args.methods, step, code, target), None
                peaks: dict = {name: {} for name in methods}
                if args.graphs:
                    methods = {
                        name: (m, graphed(make, peaks[name], simulated_capture if args.simulate else capture))
                        for name, (m, make) in methods.items()
                    }
                if not args.simulate:
                    methods, skipped = supported(methods, B, H, d, code.DTYPES[args.dtype], causal)
                    notes += skipped
                print(f"\nB={B} H={H} d={d} {args.dtype} {'causal' if causal else 'non-causal'}, {step}:", flush=True)
                measured = code.sweep(
                    methods,
                    args.sizes,
                    B=B,
                    H=H,
                    d=d,
                    causal=(causal,),
                    dtype=args.dtype,
                    device=device,
                    log=lambda line: print(f"  {line}", flush=True),
                )
                rows += with_captured_peaks(measured, peaks)
                if not args.simulate:
                    torch.cuda.empty_cache()
            print(
                f"\nB={B} H={H} d={d} {args.dtype} {'causal' if causal else 'non-causal'} "
                f"(vs SDPA: SDPA's time / this time, same mode; > 1 is faster)"
            )
            print(table(rows))
            for note in notes:
                print(f"  note: {note}")
            if rows:
                path = out / f"{config_name(B, H, d, args.dtype, causal)}.png"
                out.mkdir(parents=True, exist_ok=True)
                code.plot(rows, str(path))
                pictures.append(path)
            all_rows += rows
    meta = {"gpu": gpu, "versions": env.versions(), "conventions": conventions, "simulated": args.simulate}
    write_outputs(out, all_rows, meta)
    print(
        f"\nwrote {', '.join(str(p) for p in pictures)}, {out / 'bench.csv'} and {out / 'bench.json'} "
        f"({time.monotonic() - start:.0f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
