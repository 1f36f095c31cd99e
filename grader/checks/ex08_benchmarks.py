"""Checks for exercise 08: benchmarks (FLOP and memory formulas, the naive baseline, measure,
sweep, plot; on a GPU, honest numbers for the student's own kernels).

Nothing can be timed in the interpreter, so on a CPU `measure` and `sweep` run against a
simulated GPU (common.fixtures.FakeGPU) whose kernels have known costs, outliers, slow first
calls and a cache that a flush makes cold: a wrong procedure reports a number the simulation can
name. On a GPU the student's measurements of their own exercises 04 and 07 are compared with the
course's reference procedure run in the same process just before.
"""

import json
import math
import statistics
import uuid

import torch

from common import reference
from common.compare import CheckFailed, expect_close, expect_tensor
from common.fixtures import course_flops, forward_runner, reference_measurement
from common.shapes import attention_scale
from grader import ROOT
from grader.core import NOT_IMPLEMENTED, Fixture, OutputFile, check

# The exercise: grader/exercises.py finds it from this module's name, ex<folder>.py.
TITLE = "benchmarks"
MODULE = "benchmarks"
FUNCTIONS = ("attention_flops", "attention_memory", "naive_attention", "measure", "sweep", "plot")
KERNELS_ONLY = False  # it measures: PyTorch code outside kernels is the point
EXTRA_IMPORTS = ("time", "statistics", "matplotlib.figure")

MODES = ("fwd", "bwd", "fwd+bwd")
RESULT_KEYS = ("ms", "tflops", "peak_mib", "status")
ROW_KEYS = ("method", "mode", "label", "B", "H", "N", "d", "causal", "dtype", "device") + RESULT_KEYS
PERF_SHAPE = {"B": 4, "H": 32, "N": 4096, "d": 64, "causal": False, "dtype": "float16"}
# Timed by the student's measure: long enough calls (5 ms and more) that the host's launch overhead,
# which a host clock counts and CUDA events partly hide, stays far below the 10% allowed.
TIMING_SHAPE = PERF_SHAPE | {"N": 8192}
# Timed checks have the GPU to themselves among graders (grader.turns); other programs on it still skew them.
SHARED_GPU = (
    "If another program used this GPU meanwhile (nvidia-smi lists them), it slowed one of the two "
    "timings: grade again when the GPU is idle."
)


def _world(what: str) -> str:
    """A fresh name for a simulated GPU: every call of a check gets its own."""
    return f"{what}-{uuid.uuid4().hex[:8]}"


# ----------------------------------------------------------------------------- shared expectations
def _number(what, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise CheckFailed(f"{what} should be a finite number, got {value!r}")
    return float(value)


def _result(what, result, keys=RESULT_KEYS):
    if not isinstance(result, dict):
        raise CheckFailed(f"{what} should return a dict (plain data: {', '.join(keys)}), got {type(result).__name__}")
    missing = [k for k in keys if k not in result]
    if missing:
        raise CheckFailed(f"{what} returned a dict without {', '.join(missing)}: it needs {', '.join(keys)}")
    return result


def _close(a, b, rel):
    return abs(a - b) <= rel * abs(b)


# ----------------------------------------------------------------------------- formulas
def _flops_advice(B, H, N, d, causal, mode, got):
    ref = course_flops(B, H, N, d, causal, mode)
    ratio = got / ref if ref else math.inf
    for factor, why in (
        (2.0, "causal attention counts half the work: divide the forward count by 2 when causal"),
        (
            0.5,
            "a matmul of [N, d] by [d, N] costs 2 * N * N * d FLOPs (one multiply and one add "
            "per term), and the forward has two of them",
        ),
        (2.0 / 2.5, "the backward counts 2.5 times the forward (five matmuls, S recomputed)"),
        (1.0 / 3.5, "fwd+bwd counts the forward and the backward: 3.5 times the forward"),
        (2.5 / 3.5, "fwd+bwd counts the forward too: 1 + 2.5 = 3.5 times the forward"),
        (1.0 / 2.5, "mode 'bwd' is 2.5 times the forward, not the forward itself"),
    ):
        if _close(ratio, factor, 1e-6):
            return why
    return "forward = 4 * B * H * N^2 * d, halved when causal; bwd = 2.5 x forward; fwd+bwd = 3.5 x forward"


def _memory_reference(B, H, N, d, size, method):
    if method == "naive":
        return B * H * (2 * N * N + N * d) * size
    return B * H * N * (d * size + 4)


def _memory_advice(B, H, N, d, size, method, got):
    if method == "naive":
        if got == B * H * (N * N + N * d) * size:
            return "S and P are both alive while the softmax writes P: count two N x N tensors"
        if got == B * H * 2 * N * N * size:
            return "O [B, H, N, d] is allocated too, while P @ V runs"
        return "naive: B * H * (2 * N^2 + N * d) elements of element_size bytes (S, P, O)"
    if got == B * H * N * d * size:
        return "lse is part of the output too: B * H * N float32 values (4 bytes each)"
    return "flash: O [B, H, N, d] in element_size bytes plus lse [B, H, N] in float32 (4 bytes)"


FORMULA_SHAPES = [
    (1, 1, 1, 16),
    (2, 3, 17, 64),
    (1, 8, 128, 32),
    (4, 32, 4096, 64),
    (4, 16, 4096, 128),
    (2, 8, 1000, 64),
    (1, 4, 16384, 64),
    (8, 2, 65536, 128),
    (3, 5, 333, 16),
]


@check(points=1)
def formulas(impl, ctx):
    """attention_flops (fwd, bwd, fwd+bwd, causal) and attention_memory (naive, flash) over many shapes"""
    for B, H, N, d in FORMULA_SHAPES:
        for causal in (False, True):
            for mode in MODES:
                got = _number(
                    f"attention_flops({B}, {H}, {N}, {d}, causal={causal}, mode={mode!r})",
                    impl.attention_flops(B, H, N, d, causal=causal, mode=mode),
                )
                if not _close(got, course_flops(B, H, N, d, causal, mode), 1e-9):
                    raise CheckFailed(
                        f"attention_flops(B={B}, H={H}, N={N}, d={d}, causal={causal}, mode={mode!r}) = {got:.6g}, "
                        f"expected {course_flops(B, H, N, d, causal, mode):.6g}.\n"
                        f"Likely cause: {_flops_advice(B, H, N, d, causal, mode, got)}"
                    )
        for size in (2, 4):
            for method in ("naive", "flash"):
                want = _memory_reference(B, H, N, d, size, method)
                got = _number(
                    f"attention_memory({B}, {H}, {N}, {d}, {size}, {method!r})",
                    impl.attention_memory(B, H, N, d, size, method),
                )
                if got != want:
                    raise CheckFailed(
                        f"attention_memory(B={B}, H={H}, N={N}, d={d}, element_size={size}, method={method!r}) = "
                        f"{got:.0f} bytes, expected {want} bytes.\n"
                        f"Likely cause: {_memory_advice(B, H, N, d, size, method, got)}"
                    )


# ----------------------------------------------------------------------------- naive attention
def _naive_suspects(q, k, v, causal, sm_scale):
    scale = attention_scale(q.shape[-1], sm_scale)
    N = q.shape[-2]
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    i, j = torch.arange(N, device=q.device)[:, None], torch.arange(N, device=q.device)[None, :]

    def attend(scores, hidden):
        return torch.softmax(scores.masked_fill(hidden, -math.inf), dim=-1) @ v.double()

    out = {
        "sm_scale is ignored (1/sqrt(d) is used instead): scale q (or the scores) by the sm_scale argument": attend(
            s / scale * attention_scale(q.shape[-1]), (j > i) if causal else torch.zeros_like(j > i)
        ),
        "the softmax runs along the queries (dim=-2): it normalises each row of scores, over the keys (dim=-1)": torch.softmax(
            s.masked_fill((j > i) if causal else torch.zeros_like(j > i), -math.inf), dim=-2
        )
        @ v.double(),
    }
    if causal:
        out["the causal mask is missing: keys j > i get weight"] = attend(s, torch.zeros_like(j > i))
    else:
        out["a causal mask is applied although causal=False"] = attend(s, j > i)
    return out


@check(points=1)
def naive_baseline(impl, ctx):
    """naive_attention against the float64 reference: causal and not, explicit sm_scale, fp32 and fp16"""
    cases = [
        (2, 3, 100, 64, False, None, torch.float32),
        (2, 3, 100, 64, True, None, torch.float32),
        (1, 2, 17, 32, True, 0.3, torch.float32),
        (2, 2, 129, 64, False, 0.3, torch.float16),
        (2, 2, 129, 64, True, None, torch.float16),
    ]
    for i, (B, H, N, d, causal, sm_scale, dtype) in enumerate(cases):
        q, k, v = (ctx.randn((B, H, N, d), dtype, f"naive{i}.{n}") for n in "qkv")
        kwargs = {"causal": causal} | ({"sm_scale": sm_scale} if sm_scale is not None else {})
        o = impl.naive_attention(q, k, v, **kwargs)
        flags = [str(dtype)[6:], "causal" if causal else "non-causal"] + ([f"sm_scale={sm_scale}"] if sm_scale else [])
        what = f"naive_attention B={B} H={H} N={N} d={d} ({', '.join(flags)})"
        expect_tensor(what, o, (B, H, N, d), dtype)
        ref, _ = reference.attention(q, k, v, causal, sm_scale)
        lowp, _ = reference.attention_lowp(q, k, v, causal, sm_scale)
        expect_close(
            what,
            o,
            ref,
            lowp,
            dtype,
            blocks=(64, d),
            suspects=_naive_suspects(q, k, v, causal, sm_scale),
            diagnose=_diagnose_naive,
        )


def _diagnose_naive(m):
    nan_rows = torch.isnan(m.out).any(-1)
    if nan_rows[..., 0].any():
        return (
            "query 0 came out NaN: it sees only key 0, and a mask that also hides the diagonal (j >= i) "
            "leaves it no key at all (softmax of all -inf); hide only j > i, e.g. with triu(1)"
        )
    if nan_rows.any():
        return "NaN rows: is the max subtracted before exp (torch.softmax does it), and is every row left a key?"
    return None


# ----------------------------------------------------------------------------- measure: time
# The simulated kernel: 12 slow first calls (compiling, autotuning), then cold-cache costs with
# two outliers; each call costs the host 0.005 ms to launch; a flush keeps the device busy 3 ms;
# without a flush since the kernel's previous call it runs warm, 0.6 times as long.
TIMED_COSTS = [2.00, 2.04, 1.96, 8.50, 2.02, 1.98, 2.06, 1.94, 11.0, 2.01, 1.99]
WARMUP, REPEATS, LAUNCH_MS, FLUSH_MS, WARM, SLOW_MS = 12, len(TIMED_COSTS), 0.005, 3.0, 0.6, 40.0
TIMING_FLOPS = 3.0e12


def _timing_diagnosis(ms):
    median, mean = statistics.median(TIMED_COSTS), statistics.mean(TIMED_COSTS)
    if ms < 0.1:
        if _close(ms * 1e3, median + LAUNCH_MS, 0.02):
            return "ms is in seconds: report milliseconds (seconds * 1e3)"
        return (
            "only the launch was timed: a kernel call returns as soon as the work is queued, so call "
            "device.sync() after fn() and before reading the clock (and time with device.clock(), not "
            "your own clock: the grader's device is simulated)"
        )
    if ms > SLOW_MS / 2:
        return (
            "the warm-up calls (the slow first ones: compiling, autotuning) are in your timing: run fn() "
            "`warmup` times before timing anything, and time `repeats` calls after that"
        )
    if _close(ms, mean + LAUNCH_MS, 0.02):
        return (
            "this is the mean of the timed calls: two of them were slowed down (another process, a clock "
            "change) and pull the mean up; report the median, which ignores such outliers"
        )
    if _close(ms, median * WARM + LAUNCH_MS, 0.03):
        return (
            "the kernel ran with a warm cache: its data was still in L2 from the previous call. Call "
            "device.flush_cache() before each timed call, as a real model's attention reads cold data"
        )
    if _close(ms, median + FLUSH_MS + LAUNCH_MS, 0.05) or _close(ms, median + FLUSH_MS, 0.05):
        return (
            "the cache flush is in your timing: after device.flush_cache(), call device.sync() before "
            "reading the clock (the flush is queued work too), and start the clock after it"
        )
    return (
        "time each of `repeats` calls as: flush_cache(); sync(); start = clock(); fn(); sync(); "
        "(clock() - start) * 1e3, and report the median"
    )


@check(points=1)
def measure_timing(impl, ctx):
    """measure on a simulated GPU: warm-up excluded, synchronised, cache flushed, the median, TFLOPS"""
    world = _world("timing")
    kernel = Fixture(
        "fake_kernel",
        {"world": world, "costs_ms": TIMED_COSTS, "slow_calls": WARMUP, "slow_ms": SLOW_MS, "warm_factor": WARM},
    )
    device = Fixture("fake_gpu", {"world": world, "launch_ms": LAUNCH_MS, "flush_ms": FLUSH_MS})
    call = f"measure(fn, flops={TIMING_FLOPS:g}, warmup={WARMUP}, repeats={REPEATS}, device=<simulated GPU>)"
    result = _result(call, impl.measure(kernel, flops=TIMING_FLOPS, warmup=WARMUP, repeats=REPEATS, device=device))
    if result["status"] != "ok":
        raise CheckFailed(f"{call} returned status {result['status']!r}: fn ran fine, so it should be 'ok'")
    ms = _number(f"{call}['ms']", result["ms"])
    want = statistics.median(TIMED_COSTS) + LAUNCH_MS
    if not _close(ms, want, 0.01):
        raise CheckFailed(
            f"{call} reported {ms:.4g} ms; the simulated kernel takes {want:.4g} ms per call (the median of its "
            f"timed calls: {', '.join(f'{c:g}' for c in TIMED_COSTS)} ms, plus {LAUNCH_MS} ms to launch).\n"
            f"Likely cause: {_timing_diagnosis(ms)}"
        )
    tflops = _number(f"{call}['tflops']", result["tflops"])
    if not _close(tflops, TIMING_FLOPS / (ms * 1e-3) / 1e12, 1e-6):
        raise CheckFailed(
            f"{call} reported {tflops:.4g} TFLOPS for {ms:.4g} ms, expected {TIMING_FLOPS / (ms * 1e-3) / 1e12:.4g}: "
            "TFLOPS is flops / seconds / 1e12 (seconds = ms * 1e-3)"
        )


# ----------------------------------------------------------------------------- measure: memory, OOM
INPUTS_MIB, EARLIER_PEAK_MIB, SLOW_MIB, EXTRA_MIB = 300, 2000, 1024, 48


def _memory_diagnosis(mib):
    if mib >= EARLIER_PEAK_MIB:
        return (
            "the peak counter was not restarted: device.peak() is the most memory held since the last "
            "device.reset_peak(), which includes earlier work; call reset_peak() right before the measured call"
        )
    if _close(mib, INPUTS_MIB + EXTRA_MIB, 0.01) or _close(mib, INPUTS_MIB + SLOW_MIB, 0.01):
        return (
            f"the {INPUTS_MIB} MiB held before the call (the inputs) are counted: subtract "
            "device.allocated() read before the call"
        )
    if _close(mib, SLOW_MIB, 0.01):
        return (
            "the memory was read on a warm-up call: the first calls compile and autotune, which allocates "
            "temporary buffers; measure memory on a call after the warm-up"
        )
    return (
        "baseline = device.allocated(); device.reset_peak(); fn(); device.sync(); "
        "peak_mib = (device.peak() - baseline) / 2**20, after the warm-up"
    )


@check(points=1)
def measure_memory_oom(impl, ctx):
    """measure on a simulated GPU: peak extra memory (inputs excluded, after warm-up); out of memory is a result"""
    world = _world("memory")
    kernel = Fixture(
        "fake_kernel",
        {"world": world, "costs_ms": [1.0], "slow_calls": 5, "slow_mib": SLOW_MIB, "extra_mib": EXTRA_MIB},
    )
    device = Fixture("fake_gpu", {"world": world, "inputs_mib": INPUTS_MIB, "earlier_peak_mib": EARLIER_PEAK_MIB})
    call = "measure(fn, flops=1e12, warmup=5, repeats=5, device=<simulated GPU>)"
    result = _result(call, impl.measure(kernel, flops=1e12, warmup=5, repeats=5, device=device))
    mib = _number(f"{call}['peak_mib']", result["peak_mib"])
    if not _close(mib, EXTRA_MIB, 0.01):
        raise CheckFailed(
            f"{call} reported peak_mib = {mib:.5g}; each call of the simulated kernel needs {EXTRA_MIB} MiB beyond "
            f"the {INPUTS_MIB} MiB of inputs held before it.\nLikely cause: {_memory_diagnosis(mib)}"
        )

    world = _world("oom")
    kernel = Fixture("fake_kernel", {"world": world, "oom": True})
    call = "measure(fn, flops=1e12, device=<simulated GPU>) with an fn that runs out of memory"
    try:
        result = impl.measure(kernel, flops=1e12, device=Fixture("fake_gpu", {"world": world}))
    except Exception as exc:  # noqa: BLE001 - the student's measure let the error through: say how to keep it
        if NOT_IMPLEMENTED in str(exc):
            raise
        raise CheckFailed(
            f"{call} raised ({str(exc).strip().splitlines()[0][:200]}): running out of memory is a result of the "
            "benchmark, not a crash. Catch torch.OutOfMemoryError around the calls and return "
            "{'ms': None, 'tflops': None, 'peak_mib': None, 'status': 'OOM'}"
        ) from None
    result = _result(call, result)
    if result["status"] != "OOM":
        raise CheckFailed(f"{call} returned status {result['status']!r}, expected 'OOM'")
    for key in ("ms", "tflops", "peak_mib"):
        if result[key] is not None and not (isinstance(result[key], float) and math.isnan(result[key])):
            raise CheckFailed(
                f"{call} returned {key} = {result[key]!r}: there is no number for a call that never ran; use None"
            )


# ----------------------------------------------------------------------------- sweep
SWEEP = {"B": 1, "H": 2, "d": 16, "dtype": "float32", "sizes": [32, 64, 128, 256]}
SWEEP_METHODS = {
    "linear": {"mode": "fwd", "tflops": 50.0, "label": "sim-linear", "mib_per_key": 0.25},
    "quadratic": {
        "mode": "fwd+bwd",
        "tflops": 20.0,
        "label": "sim-quadratic",
        "mib_per_key": 1.0,
        "quadratic": True,
        "oom_from": 128,
    },
}


def _expected_rows():
    rows = {}
    for causal in (False, True):
        for N in SWEEP["sizes"]:
            for name, spec in SWEEP_METHODS.items():
                oom = spec.get("oom_from") is not None and N >= spec["oom_from"]
                mib = spec["mib_per_key"] * ((N / 64) ** 2 if spec.get("quadratic") else N)
                rows[(name, N, causal)] = {
                    "mode": spec["mode"],
                    "label": spec["label"],
                    "status": "OOM" if oom else "ok",
                    "tflops": None if oom else spec["tflops"],
                    "peak_mib": None if oom else mib,
                }
    return rows


@check(points=1)
def sweep_rows(impl, ctx):
    """sweep on a simulated GPU: one row per (causal, N, method) with its configuration, FLOPs by mode, OOM rows"""
    world = _world("sweep")
    methods = Fixture(
        "fake_methods",
        {
            "world": world,
            "B": SWEEP["B"],
            "H": SWEEP["H"],
            "d": SWEEP["d"],
            "dtype": SWEEP["dtype"],
            "methods": SWEEP_METHODS,
        },
    )
    device = Fixture("fake_gpu", {"world": world, "launch_ms": 0.0, "flush_ms": 0.0})
    call = (
        f"sweep(methods, sizes={SWEEP['sizes']}, B={SWEEP['B']}, H={SWEEP['H']}, d={SWEEP['d']}, "
        f"causal=(False, True), dtype={SWEEP['dtype']!r}, device=<simulated GPU>)"
    )
    rows = impl.sweep(
        methods,
        SWEEP["sizes"],
        B=SWEEP["B"],
        H=SWEEP["H"],
        d=SWEEP["d"],
        causal=(False, True),
        dtype=SWEEP["dtype"],
        device=device,
    )
    expected = _expected_rows()
    if not isinstance(rows, (list, tuple)) or len(rows) != len(expected):
        raise CheckFailed(
            f"{call} should return a list of {len(expected)} rows (2 causal flags x 4 sizes x 2 "
            f"methods), got {len(rows) if isinstance(rows, (list, tuple)) else type(rows).__name__}"
        )
    seen = {}
    for row in rows:
        row = _result(f"{call}: a row", row, ROW_KEYS)
        seen[(row["method"], row["N"], row["causal"])] = row
    for key, want in expected.items():
        name, N, causal = key
        where = f"{call}: the row of {name!r} at N={N}, causal={causal}"
        row = seen.get(key)
        if row is None:
            raise CheckFailed(
                f"{call} has no row for method {name!r} at N={N}, causal={causal} "
                "(rows are found by their 'method', 'N' and 'causal')"
            )
        config = {
            "mode": want["mode"],
            "label": want["label"],
            "B": SWEEP["B"],
            "H": SWEEP["H"],
            "d": SWEEP["d"],
            "dtype": SWEEP["dtype"],
            "device": "simulated GPU",
            "status": want["status"],
        }
        for field, value in config.items():
            if row[field] != value and not (field == "label" and want["status"] == "OOM"):
                hint = {"label": " (the second value make() returns)", "device": " (device.name)"}.get(field, "")
                raise CheckFailed(f"{where} has {field} = {row[field]!r}, expected {value!r}{hint}")
        if want["status"] == "OOM":
            continue
        tflops = _number(f"{where}: tflops", row["tflops"])
        if not _close(tflops, want["tflops"], 0.01):
            ratio = tflops / want["tflops"]
            why = (
                "the FLOPs were counted as non-causal: pass the row's causal flag to attention_flops"
                if causal and _close(ratio, 2.0, 0.01)
                else "the FLOPs were counted for the wrong mode: pass each method's mode to attention_flops"
                if any(_close(ratio, f, 0.01) for f in (1 / 3.5, 3.5, 2.5 / 3.5))
                else "count each method's FLOPs with attention_flops(B, H, N, d, causal, mode) and let measure turn "
                "them into TFLOPS"
            )
            raise CheckFailed(
                f"{where} reports {tflops:.4g} TFLOPS; the simulated method runs at "
                f"{want['tflops']:g}.\nLikely cause: {why}"
            )
        mib = _number(f"{where}: peak_mib", row["peak_mib"])
        if not _close(mib, want["peak_mib"], 0.01):
            raise CheckFailed(
                f"{where} reports {mib:.4g} MiB, the simulated method needs {want['peak_mib']:.4g}: "
                "the row's numbers are measure's result for that method at that size"
            )


# ----------------------------------------------------------------------------- plot
PLOT_DEVICE = "Simulated H200"
PLOT_DATA = {  # (method, mode): {N: (ms, peak MiB) or None for OOM}
    ("naive", "fwd"): {512: (0.21, 140.0), 1024: (0.70, 544.0), 2048: (2.6, 2112.0), 4096: None},
    ("sdpa", "fwd"): {512: (0.04, 8.0), 1024: (0.11, 16.0), 2048: (0.36, 32.0), 4096: (1.30, 64.0)},
    ("course", "fwd+bwd"): {512: (0.30, 40.0), 1024: (0.62, 80.0), 2048: (1.9, 160.0), 4096: (6.4, 320.0)},
}


def _plot_rows():
    rows = []
    for (method, mode), points in PLOT_DATA.items():
        for N, numbers in points.items():
            row = {
                "method": method,
                "mode": mode,
                "label": "",
                "B": 4,
                "H": 32,
                "N": N,
                "d": 64,
                "causal": False,
                "dtype": "float16",
                "device": PLOT_DEVICE,
            }
            if numbers is None:
                row |= {"ms": None, "tflops": None, "peak_mib": None, "status": "OOM"}
            else:
                ms, mib = numbers
                row |= {
                    "ms": ms,
                    "tflops": course_flops(4, 32, N, 64, False, mode) / (ms * 1e-3) / 1e12,
                    "peak_mib": mib,
                    "status": "ok",
                }
            rows.append(row)
    return rows


def _png_size(content):
    """(width, height) of a PNG file's bytes, or None when they are not a PNG."""
    if not content or content[:8] != b"\x89PNG\r\n\x1a\n" or content[12:16] != b"IHDR":
        return None
    return int.from_bytes(content[16:20], "big"), int.from_bytes(content[20:24], "big")


def _panel(axes, unit, what):
    found = [ax for ax in axes if unit.lower() in str(ax.get("ylabel", "")).lower()]
    if len(found) != 1:
        labels = ", ".join(repr(ax.get("ylabel", "")) for ax in axes)
        raise CheckFailed(
            f"the figure needs one panel of {what} whose y label names its unit, {unit!r} "
            f"(y labels found: {labels}); label each axis with its unit"
        )
    return found[0]


@check(points=1)
def plot_figure(impl, ctx):
    """plot writes a PNG of three panels (latency, TFLOPS, memory) with units, log axes, OOM marked, versions in the title"""
    import triton

    rows = _plot_rows()
    png = OutputFile("benchmark.png")
    summary = impl.plot(rows, png)
    size = _png_size(png.content)
    if size is None:
        raise CheckFailed(
            "plot(results, path) wrote no PNG file at path"
            if not png.content
            else "the file plot wrote at path is not a PNG: save with fig.savefig(path, format='png')"
        )
    if size[0] < 600 or size[1] < 250 or len(png.content) < 8000:
        raise CheckFailed(
            f"the PNG is {size[0]} x {size[1]} pixels ({len(png.content)} bytes): too small to read "
            "three panels; use a figure of about 16 x 5 inches"
        )
    if not isinstance(summary, dict) or not isinstance(summary.get("axes"), list):
        raise CheckFailed("plot should return figure_summary(fig), the description of what it drew")
    axes = summary["axes"]
    if len(axes) != 3:
        raise CheckFailed(
            f"the figure has {len(axes)} panels: it needs three panels, latency, throughput and peak memory against N"
        )
    panels = {
        "ms": _panel(axes, "ms", "latency"),
        "tflops": _panel(axes, "TFLOP", "throughput"),
        "peak_mib": _panel(axes, "MiB", "peak memory"),
    }
    for field, ax in panels.items():
        if "n" not in str(ax.get("xlabel", "")).lower().split() and "N" not in str(ax.get("xlabel", "")):
            raise CheckFailed(
                f"the {field} panel's x axis is labelled {ax.get('xlabel')!r}: name it after N, the sequence length"
            )
        if ax.get("xscale") != "log":
            raise CheckFailed(
                f"the {field} panel's x axis is {ax.get('xscale')}: N doubles from point to point, "
                "so use a log scale (base 2) to space the sizes evenly"
            )
    for field in ("ms", "peak_mib"):
        if panels[field].get("yscale") != "log":
            raise CheckFailed(
                f"the {field} panel's y axis is {panels[field].get('yscale')}: its values span "
                "decades (N^2 against N), so use a log scale"
            )
    for (method, mode), points in PLOT_DATA.items():
        want = {N: numbers for N, numbers in points.items() if numbers is not None}
        for field, ax in panels.items():
            lines = [
                ln
                for ln in ax.get("lines", [])
                if method in str(ln.get("label"))
                and mode in str(ln.get("label"))
                and not str(ln.get("label")).startswith("_")
            ]
            if len(lines) != 1:
                raise CheckFailed(
                    f"the {field} panel should have one line labelled with {method!r} and {mode!r} "
                    f"(found {len(lines)}): one line per (method, mode), its label naming both"
                )
            got = {x: y for x, y in zip(lines[0].get("x", []), lines[0].get("y", [])) if not math.isnan(y)}
            ref = {
                N: next(r[field] for r in rows if (r["method"], r["mode"], r["N"]) == (method, mode, N)) for N in want
            }
            if set(got) - set(ref):
                extra = sorted(set(got) - set(ref))
                raise CheckFailed(
                    f"the {field} line of {method} {mode} has points at N = {extra}, where the "
                    "method ran out of memory (status 'OOM'): an OOM is not a number; draw only "
                    "the rows whose status is 'ok', and mark the OOM with a text"
                )
            if set(got) != set(ref) or any(not _close(got[N], ref[N], 1e-6) for N in ref):
                raise CheckFailed(
                    f"the {field} line of {method} {mode} shows {got}, but the results say {ref}: "
                    f"plot each row's {field!r} at its N"
                )
    if not any("OOM" in t for ax in axes for t in ax.get("texts", [])):
        raise CheckFailed(
            "naive fwd ran out of memory at N=4096, but no panel says so: mark it with the text "
            "'OOM' (ax.annotate) where its line stops"
        )
    title = str(summary.get("title", ""))
    for part, why in (
        (PLOT_DEVICE, "the GPU (the rows' 'device')"),
        (torch.__version__, "torch's version"),
        (triton.__version__, "triton's version"),
    ):
        if part not in title:
            raise CheckFailed(
                f"the figure's title {title!r} does not name {why}, {part!r}: a benchmark figure must "
                "say where and with which versions it was made"
            )


# ----------------------------------------------------------------------------- on a GPU: your own kernels
def _reference(marker, what):
    if not marker.content:
        raise CheckFailed(f"the course's reference measurement of {what} did not come back; please report this")
    return json.loads(marker.content)


def _own(fixture, shape, reference_name):
    ref = OutputFile(reference_name)
    return Fixture(fixture, dict(shape) | {"reference": ref}), ref


@check(points=2, timed=True)
def honest_timing(impl, ctx):
    """your measure of your own 04 forward and 07 forward+backward (B4 H32 N8192 d64 fp16) within 10% of the course's"""
    for fixture, mode, what in (
        ("own_forward", "fwd", "your exercise 04 forward"),
        ("own_fwd_bwd", "fwd+bwd", "your exercise 07 forward + backward"),
    ):
        fn, ref = _own(fixture, TIMING_SHAPE, f"reference-{fixture}.json")
        shape = {k: TIMING_SHAPE[k] for k in ("B", "H", "N", "d", "causal")}
        flops = course_flops(**shape, mode=mode)
        result = _result(f"measure({what})", impl.measure(fn, flops=flops))
        reference_ms = _reference(ref, what)["ms"]
        ms = _number(f"measure({what})['ms']", result["ms"])
        ratio = ms / reference_ms
        if not 0.9 <= ratio <= 1.1:
            why = (
                "faster than the kernel can run: is every call synchronised (device.sync() after fn()), and the "
                "cache flushed before each?"
                if ratio < 1
                else "slower than the kernel runs: are warm-up calls (compiling, autotuning) in the timing, or the "
                "mean of calls with outliers reported instead of the median?"
            )
            raise CheckFailed(
                f"measure({what}, B=4 H=32 N=8192 d=64 fp16) reported {ms:.3f} ms; the course's "
                f"reference procedure (triton.testing.do_bench, median, cold cache) measured "
                f"{reference_ms:.3f} ms just before (ratio {ratio:.2f}, allowed 0.9-1.1): {why} {SHARED_GPU}"
            )
        tflops = _number(f"measure({what})['tflops']", result["tflops"])
        if not _close(tflops, flops / (ms * 1e-3) / 1e12, 1e-3):
            raise CheckFailed(
                f"measure({what}) reported {tflops:.1f} TFLOPS for {ms:.3f} ms and {flops:.4g} FLOPs: "
                "TFLOPS is flops / (ms * 1e-3) / 1e12"
            )


def _solution_forward():
    """The course solution's forward, run here on the grader's side (trusted code)."""
    from common.loader import load_module

    path = ROOT / "solutions" / "04_flash_forward" / "flash_forward.py"
    if not path.is_file():
        raise CheckFailed(
            "this copy of the course has no solutions/ (a student pack): the speed check compares "
            "with the course solution and runs only where the course's repository is"
        )
    return load_module(path).flash_attention_forward


@check(points=1, timed=True)
def forward_speed(impl, ctx):
    """your 04 forward at B4 H32 N4096 d64 fp16 reaches at least half the course solution's TFLOPS, same run, same config"""
    fn, ref = _own("own_forward", PERF_SHAPE, "reference-speed.json")
    shape = {k: PERF_SHAPE[k] for k in ("B", "H", "N", "d", "causal")}
    flops = course_flops(**shape, mode="fwd")
    impl.measure(fn, flops=flops, warmup=1, repeats=1)  # builds the fixture, which measures your kernel first
    yours = flops / (_reference(ref, "your forward")["ms"] * 1e-3) / 1e12
    # Run as yours is (grader.core.run_check): the first config of its list that fits, untuned.
    solution = reference_measurement(forward_runner(_solution_forward(), **shape, dtype=PERF_SHAPE["dtype"]))
    course = flops / (solution["ms"] * 1e-3) / 1e12
    ratio = yours / course
    note = (
        f"your forward: {yours:.0f} TFLOPS, the course solution: {course:.0f} TFLOPS in the same run "
        f"(ratio {ratio:.2f}, at least 0.5 earns the point)"
    )
    if ratio < 0.5:
        raise CheckFailed(
            f"{note}. Both ran the first config of their autotuning list that fits this GPU (grading runs "
            "one config, untuned). Usual causes: masks on every key block (keep them to the last block and the "
            "diagonal), exp instead of exp2, p not cast to fp16 before the second tl.dot, a first config "
            f"with tiles smaller than the course's 64 x 32. {SHARED_GPU}"
        )
    return note


@check(points=1, gpu_only=True)
def memory_linear(impl, ctx):
    """your measure of your own 04 and 07 memory (N = 4096, 16384) matches the course's and grows linearly in N"""
    for fixture, mode, what in (
        ("own_forward", "fwd", "your exercise 04 forward"),
        ("own_fwd_bwd", "fwd+bwd", "your exercise 07 forward + backward"),
    ):
        peaks = {}
        for N in (4096, 16384):
            # Non-causal, as the timing checks: their compiled kernels serve (causal needs no other memory).
            shape = {"B": 1, "H": 4, "N": N, "d": 64, "causal": False, "dtype": "float16"}
            fn, ref = _own(fixture, shape, f"memory-{fixture}-{N}.json")
            result = _result(
                f"measure({what})", impl.measure(fn, flops=course_flops(1, 4, N, 64, False, mode), warmup=3, repeats=5)
            )
            mib = _number(f"measure({what}, N={N})['peak_mib']", result["peak_mib"])
            want = _reference(ref, what)["peak_mib"]
            if abs(mib - want) > 0.05 * want + 1.0:
                raise CheckFailed(
                    f"measure({what}, B=1 H=4 N={N} d=64 fp16) reported {mib:.1f} MiB of peak extra memory; "
                    f"the course's procedure measured {want:.1f} MiB just before. {_memory_diagnosis(mib)}"
                )
            peaks[N] = mib
        growth = peaks[16384] / max(peaks[4096], 1e-9)
        if growth > 6:
            raise CheckFailed(
                f"{what} needs {peaks[4096]:.1f} MiB at N=4096 and {peaks[16384]:.1f} MiB at N=16384: {growth:.1f} "
                "times more for 4 times the keys. FlashAttention's extra memory grows like N (outputs, lse, "
                "gradients); growth near 16 means something N x N is allocated"
            )


CHECKS = [
    formulas,
    naive_baseline,
    measure_timing,
    measure_memory_oom,
    sweep_rows,
    plot_figure,
    honest_timing,
    forward_speed,
    memory_linear,
]
