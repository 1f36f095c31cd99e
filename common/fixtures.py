"""Callables the grader hands to student code, built on the student's side.

A check cannot send a function to the student's process, only plain data; it sends a marker
`Fixture(name, params)` instead, and the student's function receives `<name>(**params)` from this
module. Exercise 08 (benchmarks) uses them:

- a simulated GPU (`fake_gpu`) with kernels of known cost (`fake_kernel`, `fake_methods`): the
  grader checks the logic of `measure` and `sweep` on a CPU, where nothing real can be timed;
- the student's own kernels at a given shape (`own_forward`, `own_fwd_bwd`), optionally measured
  first by the course's reference procedure, which writes its numbers to a file for the grader.

This module belongs to the student runtime: it imports nothing from the grader.
"""

import json

import torch


def student_exercise(folder: str):
    """The student's module of exercise `folder` ("04_flash_forward"), from the course being graded."""
    from common.loader import load_exercise

    return load_exercise(folder)


# ----------------------------------------------------------------------------- a simulated GPU
MIB = 2**20


class FakeGPU:
    """A GPU in simulation, with the methods measure() uses (see exercise 08's CudaDevice).

    Time is simulated: clock() returns seconds that pass only when the simulation says so.
    Launching work (a kernel call, a cache flush) costs the host `launch_ms` and queues the work on
    the device; the device runs queued work one item after the other; sync() makes the host wait
    until the queue is empty. A timing without sync() before reading the clock therefore sees only
    the launch, exactly as on a real GPU.

    Memory: `allocated` bytes are held (the inputs) before anything runs; a kernel call holds its
    extra bytes while it runs; the peak counts from the last reset_peak(). It starts far above
    what is allocated (earlier work in the same process), so a peak read without a reset is wrong.
    """

    def __init__(self, launch_ms=0.005, flush_ms=3.0, inputs_mib=300, earlier_peak_mib=2000, name="simulated GPU"):
        self.name, self.torch_device = name, "cpu"
        self.launch_ms, self.flush_ms = launch_ms, flush_ms
        self.now_ms = 0.0  # host time
        self.free_at_ms = 0.0  # when the device finishes its queue
        self.held = inputs_mib * MIB
        self.top = self.held + earlier_peak_mib * MIB
        self.flushed = True  # the cache holds nothing of any kernel's data yet

    # --------------------------------------------------------------- what measure() may call
    def sync(self):
        self.now_ms = max(self.now_ms, self.free_at_ms)

    def clock(self):
        return self.now_ms / 1e3

    def flush_cache(self):
        self.queue(self.flush_ms)
        self.flushed = True

    def allocated(self):
        return self.held

    def reset_peak(self):
        self.top = self.held

    def peak(self):
        return self.top

    # --------------------------------------------------------------- what the fake kernels do
    def queue(self, cost_ms):
        self.now_ms += self.launch_ms
        self.free_at_ms = max(self.now_ms, self.free_at_ms) + cost_ms

    def hold_briefly(self, extra_bytes):
        self.top = max(self.top, self.held + extra_bytes)


class FakeKernel:
    """A function of known cost on a FakeGPU.

    Its first `slow_calls` calls are slow and allocate a lot (compiling, autotuning, clocks ramping
    up); after them, call i costs costs_ms[i % len(costs_ms)] on a cold cache, `warm_factor` times
    that when the cache was not flushed since its previous call, and holds `extra_mib` while it runs.
    With `oom=True` every call runs out of memory.
    """

    def __init__(
        self, gpu, costs_ms=(1.0,), slow_calls=0, slow_ms=40.0, slow_mib=1024, extra_mib=48, warm_factor=0.6, oom=False
    ):
        self.gpu, self.costs_ms, self.slow_calls, self.slow_ms = gpu, list(costs_ms), slow_calls, slow_ms
        self.slow_mib, self.extra_mib, self.warm_factor, self.oom = slow_mib, extra_mib, warm_factor, oom
        self.calls = 0

    def __call__(self):
        if self.oom:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated): tried to allocate 64.00 GiB")
        i, self.calls = self.calls, self.calls + 1
        if i < self.slow_calls:
            cost, extra = self.slow_ms, self.slow_mib
        else:
            steady = i - self.slow_calls
            cost = self.costs_ms[steady % len(self.costs_ms)] * (1.0 if self.gpu.flushed else self.warm_factor)
            extra = self.extra_mib
        self.gpu.hold_briefly(extra * MIB)
        self.gpu.queue(cost)
        self.gpu.flushed = False


_WORLDS: dict[str, FakeGPU] = {}


def _gpu(world: str, **settings) -> FakeGPU:
    """The FakeGPU named `world`: every fixture naming the same world shares it."""
    if world not in _WORLDS:
        _WORLDS[world] = FakeGPU(**settings)
    return _WORLDS[world]


def fake_gpu(world: str, **settings) -> FakeGPU:
    """The simulated device of `world` (settings: see FakeGPU)."""
    return _gpu(world, **settings)


def fake_kernel(world: str, **behaviour) -> FakeKernel:
    """A kernel of known cost on the simulated device of `world` (behaviour: see FakeKernel)."""
    return FakeKernel(_gpu(world), **behaviour)


def course_flops(B, H, N, d, causal, mode) -> float:
    """The course's FLOP count: forward 4*B*H*N^2*d, halved when causal; backward 2.5x the forward."""
    return 4.0 * B * H * N * N * d / (2 if causal else 1) * {"fwd": 1.0, "bwd": 2.5, "fwd+bwd": 3.5}[mode]


class FakeMethod:
    """make(q, k, v, causal) -> (fn, label) for sweep(): a simulated attention method running at
    `tflops` with `mib_per_key` MiB of extra memory per key (`quadratic`: per key squared, in
    units of 64 keys), out of memory from N = `oom_from` on. Complains about inputs of the wrong
    shape, dtype or device."""

    def __init__(self, gpu, mode, tflops, label, mib_per_key=0.0, quadratic=False, oom_from=None, expect=None):
        self.gpu, self.mode, self.tflops, self.label = gpu, mode, tflops, label
        self.mib_per_key, self.quadratic, self.oom_from, self.expect = mib_per_key, quadratic, oom_from, expect or {}

    def __call__(self, q, k, v, causal):
        self._check_inputs(q, k, v)
        B, H, N, d = q.shape
        flops = course_flops(B, H, N, d, bool(causal), self.mode)
        extra = self.mib_per_key * ((N / 64) ** 2 if self.quadratic else N)
        kernel = FakeKernel(
            self.gpu,
            costs_ms=(flops / (self.tflops * 1e9),),
            slow_calls=1,
            slow_ms=50.0,
            slow_mib=512,
            extra_mib=extra,
            warm_factor=1.0,
            oom=self.oom_from is not None and N >= self.oom_from,
        )
        return kernel, self.label

    def _check_inputs(self, q, k, v):
        for name, t in (("q", q), ("k", k), ("v", v)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"sweep passed {name} as a {type(t).__name__}: make(q, k, v, causal) takes tensors")
            want = self.expect
            if want.get("dtype") and t.dtype != want["dtype"]:
                raise TypeError(f"sweep passed {name} of dtype {t.dtype}, but the sweep asked for {want['dtype']}")
            if want.get("shape") and (t.dim() != 4 or list(t.shape[:2]) + [t.shape[3]] != want["shape"]):
                raise ValueError(
                    f"sweep passed {name} of shape {tuple(t.shape)}: expected [B, H, N, d] with "
                    f"B, H, d = {want['shape']}"
                )
            if t.device.type != self.gpu.torch_device:
                raise ValueError(f"sweep passed {name} on {t.device}: make the inputs on device.torch_device")


def fake_methods(world: str, B: int, H: int, d: int, dtype: str, methods: dict) -> dict:
    """{name: (mode, make)} for sweep(), every method simulated on the device of `world`.
    `methods`: {name: {"mode", "tflops", "label", "mib_per_key", "quadratic", "oom_from"}}."""
    gpu = _gpu(world, launch_ms=0.0, flush_ms=0.0)
    expect = {
        "dtype": {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[dtype],
        "shape": [B, H, d],
    }
    return {name: (spec["mode"], FakeMethod(gpu, expect=expect, **spec)) for name, spec in methods.items()}


# ----------------------------------------------------------------------------- the student's kernels on a GPU
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def attention_inputs(B, H, N, d, dtype="float16", seed=0, grad=False):
    """q, k, v, do [B, H, N, d] on the GPU, drawn from a fixed seed; q, k, v require grad if `grad`."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v, do = (torch.randn((B, H, N, d), generator=gen, device="cuda", dtype=DTYPES[dtype]) for _ in range(4))
    if grad:
        for t in (q, k, v):
            t.requires_grad_()
    return q, k, v, do


def forward_runner(forward, B, H, N, d, causal, dtype="float16"):
    """A zero-argument function running `forward(q, k, v, causal)` (exercise 04's signature) on fixed inputs."""
    q, k, v, _ = attention_inputs(B, H, N, d, dtype)

    def run():
        return forward(q, k, v, causal)

    return run


def fwd_bwd_runner(attention, B, H, N, d, causal, dtype="float16"):
    """A zero-argument function running `attention(q, k, v, causal)` (exercise 07's flash_attention,
    or any differentiable attention) forward and backward on fixed inputs."""
    q, k, v, do = attention_inputs(B, H, N, d, dtype, grad=True)

    def run():
        for t in (q, k, v):
            t.grad = None  # each call allocates its gradients afresh, as a training step does
        attention(q, k, v, causal).backward(do)

    return run


def reference_measurement(fn) -> dict:
    """The course's own measurement of fn() on a GPU: {"ms": the median of triton.testing.do_bench
    (L2 flushed before each call, CUDA events), "peak_mib": peak extra memory of one call after
    warm-up}."""
    from triton.testing import do_bench

    fn()  # compile and autotune outside the measurement
    torch.cuda.synchronize()
    ms = do_bench(fn, warmup=25, rep=100, return_mode="median")
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return {"ms": ms, "peak_mib": (torch.cuda.max_memory_allocated() - before) / MIB}


def _measured_first(run, reference):
    if reference is not None:
        with open(reference, "w") as f:
            json.dump(reference_measurement(run), f)
    return run


def own_forward(B, H, N, d, causal=False, dtype="float16", reference=None):
    """The student's exercise 04 forward at this shape, as fn(). With `reference` (a path), first
    measured by the course's procedure, written there as JSON."""
    forward = student_exercise("04_flash_forward").flash_attention_forward
    return _measured_first(forward_runner(forward, B, H, N, d, causal, dtype), reference)


def own_fwd_bwd(B, H, N, d, causal=False, dtype="float16", reference=None):
    """The student's exercise 07 flash_attention forward and backward at this shape, as fn()."""
    attention = student_exercise("07_backward_dq").flash_attention
    return _measured_first(fwd_bwd_runner(attention, B, H, N, d, causal, dtype), reference)
