"""How a student's function is called, on the student's side of the grader.

`invoke` runs one call and reports what the grader must know besides the returned value:
- whether a Triton kernel was launched, and which PyTorch functions computed something outside
  the kernels (an answer computed by PyTorch earns nothing: only allocation, views, copies,
  dtype conversions and reading metadata are host work);
- with `guarded=True`: outputs allocated with torch.empty* are NaN-filled (so unwritten elements
  show) and sit between guard zones (so a store past either end is caught instead of corrupting
  memory), and the inputs must come back unchanged;
- on a GPU, the peak GPU memory the call allocated beyond what was allocated before it.

It runs in the sandboxed process that serves the grader (common.serve) and, for practice, in a
notebook's own kernel. It imports nothing from the grader.
"""

import math
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

GUARD_VALUE = 12345.0  # fills the guard zones around outputs; any other value there was stored by a kernel
_ALLOCATORS = ("empty", "empty_like", "empty_strided")

# What host code may do with tensors (PyTorch functions and Tensor methods and properties, by
# name): allocate, view, copy, convert and read metadata. Anything else (arithmetic, reductions,
# matmul, softmax, attention) computes, and must happen in a Triton kernel.
HOST_FUNCTIONS = frozenset(
    """
    empty empty_like empty_strided zeros zeros_like ones ones_like full full_like arange tensor as_tensor
    new_empty new_empty_strided new_zeros new_ones new_full new_tensor fill_ zero_
    view view_as reshape reshape_as as_strided transpose t permute expand expand_as unsqueeze squeeze
    flatten unflatten narrow select unbind split chunk movedim contiguous __getitem__ T mT
    clone copy_ to float half bfloat16 double int long bool cpu cuda detach detach_ requires_grad_ type
    type_as __setitem__
    shape dtype device size stride dim ndim numel nelement element_size itemsize nbytes data_ptr
    storage_offset is_contiguous is_floating_point is_cuda requires_grad grad data layout is_leaf grad_fn
    item tolist __len__ __repr__ __format__ __str__ __hash__ __bool__ __index__ __int__ __float__
    get_device untyped_storage record_stream output_nr _version
    apply backward retain_grad register_hook
""".split()
)


def _function_name(func) -> tuple:
    """('torch.softmax', 'softmax'): how to show a PyTorch function, and its name in HOST_FUNCTIONS."""
    from torch.overrides import resolve_name

    full = resolve_name(func) or getattr(func, "__name__", repr(func))
    parts = full.split(".")
    if parts[-1] in ("__get__", "__set__") and len(parts) > 1:  # a property: Tensor.shape.__get__
        return ".".join(parts[:-1]), parts[-2]
    return full, parts[-1]


@dataclass
class Outcome:
    value: object
    launches: int = 0
    computed: list = field(default_factory=list)  # PyTorch functions that computed outside kernels
    problems: list = field(default_factory=list)  # messages: stray stores, modified inputs
    peak_extra: int | None = None  # bytes of GPU memory allocated at the call's peak beyond those before it


# ----------------------------------------------------------------------------- guarded outputs
@dataclass
class GuardedOutput:
    """A tensor made by torch.empty* during a call, inside a larger buffer whose guard zones
    before and after it catch stores that miss the tensor."""

    tensor: torch.Tensor
    buffer: torch.Tensor  # 1-D: [guard | the tensor's span | guard]
    guard: int

    def stray_stores(self) -> tuple:
        """(elements changed before the tensor, elements changed after it)."""
        changed = self.buffer != torch.tensor(GUARD_VALUE, dtype=self.buffer.dtype, device=self.buffer.device)
        return int(changed[: self.guard].sum()), int(changed[len(self.buffer) - self.guard :].sum())


def _guarded_like(t: torch.Tensor, made: list) -> torch.Tensor:
    span = 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride())) if t.numel() else 0
    guard = -(-max(span, 8192) // 128) * 128  # whole rows or blocks past either end; keeps 256-byte alignment
    buffer = torch.full((guard + span + guard,), GUARD_VALUE, dtype=t.dtype, device=t.device)
    out = buffer.as_strided(t.shape, t.stride(), guard)
    out.fill_(math.nan)
    made.append(GuardedOutput(out, buffer, guard))
    return out


@contextmanager
def guarded_allocations():
    """Make every floating-point tensor of torch.empty* NaN-filled and guarded; yields the list of
    GuardedOutput made inside the block."""
    originals = {name: getattr(torch, name) for name in _ALLOCATORS}
    made = []

    def guarding(allocate):
        def allocate_guarded(*args, **kwargs):
            t = allocate(*args, **kwargs)
            return _guarded_like(t, made) if t.is_floating_point() else t

        return allocate_guarded

    for name, allocate in originals.items():
        setattr(torch, name, guarding(allocate))
    try:
        yield made
    finally:
        for name, allocate in originals.items():
            setattr(torch, name, allocate)


def _stray_store_problems(made) -> list:
    problems = []
    for output in made:
        before, after = output.stray_stores()
        if before or after:
            where = " and ".join(
                f"{n} elements {side}" for n, side in ((before, "before its start"), (after, "past its end")) if n
            )
            problems.append(
                f"your kernel stored outside its output tensor of shape {tuple(output.tensor.shape)}: {where}. "
                "A store needs a mask for the last, partial block (rows or columns >= the size), and offsets "
                "built from the right strides; on a GPU such a store corrupts other memory or crashes."
            )
    return problems


# ----------------------------------------------------------------------------- what ran
class _Audit:
    """Counts Triton kernel launches and records the PyTorch functions that computed outside them."""

    def __init__(self, kernels_only: bool):
        self.kernels_only = kernels_only
        self.launches = 0
        self.computed: list[str] = []
        self.in_kernel = False


@contextmanager
def _audited(audit: _Audit):
    from torch.overrides import TorchFunctionMode
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    class HostCode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if not audit.in_kernel:
                shown, name = _function_name(func)
                if name not in HOST_FUNCTIONS and shown not in audit.computed:
                    audit.computed.append(shown)
            return func(*args, **(kwargs or {}))

    def counting(run):
        def run_counted(self, *args, **kwargs):
            if kwargs.get("warmup"):
                return run(self, *args, **kwargs)
            audit.launches += 1
            outer, audit.in_kernel = audit.in_kernel, True  # the launcher's own tensor handling is not host work
            try:
                return run(self, *args, **kwargs)
            finally:
                audit.in_kernel = outer

        return run_counted

    originals = {cls: cls.run for cls in (JITFunction, InterpretedFunction)}
    for cls, run in originals.items():
        cls.run = counting(run)
    try:
        if audit.kernels_only:
            with HostCode():
                yield
        else:
            yield
    finally:
        for cls, run in originals.items():
            cls.run = run


# ----------------------------------------------------------------------------- calls
def _tensors(args, kwargs) -> dict:
    named = {f"argument {i + 1}": a for i, a in enumerate(args)} | dict(kwargs)
    return {name: t for name, t in named.items() if isinstance(t, torch.Tensor)}


def invoke(fn, args=(), kwargs=None, guarded=False, kernels_only=True) -> Outcome:
    """Call fn(*args, **kwargs) and report what it launched and computed."""
    kwargs = kwargs or {}
    snapshots = {name: t.clone() for name, t in _tensors(args, kwargs).items()} if guarded else {}
    audit = _Audit(kernels_only)
    memory = PeakMemory.start()
    with guarded_allocations() if guarded else _nothing() as made, _audited(audit):
        value = fn(*args, **kwargs)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    outcome = Outcome(value, audit.launches, audit.computed, peak_extra=memory.extra() if memory else None)
    if guarded:
        outcome.problems += _stray_store_problems(made)
        current = _tensors(args, kwargs)
        outcome.problems += [
            f"your function changed its input ({name}) in place; inputs must come back unmodified "
            "(did a kernel store into an input pointer?)"
            for name, before in snapshots.items()
            if not torch.equal(before.nan_to_num(), current[name].nan_to_num())
        ]
    return outcome


@contextmanager
def _nothing():
    yield []


class PeakMemory:
    """What PyTorch's allocator holds at the peak of a call beyond what it held before. Read through
    torch._C: student code cannot reach `_`-private names (grader.static), so patching torch.cuda's
    public functions does not change what is read here."""

    def __init__(self, device: int):
        self.device = device
        self.before = self._allocated()["current"]
        torch._C._cuda_resetPeakMemoryStats(device)

    @classmethod
    def start(cls):
        """A watch on the current GPU from now on; None where no GPU is in use."""
        return cls(torch._C._cuda_getDevice()) if torch.cuda.is_available() and torch.cuda.is_initialized() else None

    def _allocated(self) -> dict:
        """Bytes allocated by tensors, all pools: {"current": ..., "peak": ..., ...}."""
        return torch._C._cuda_memoryStats(self.device)["allocated_bytes"]["all"]

    def extra(self) -> int:
        return max(self._allocated()["peak"] - self.before, 0)


def forward_backward(fn, inputs, grad, kwargs):
    """(out, *input grads): out = fn(*inputs, **kwargs) with autograd, then out.backward(grad)."""
    leaves = [t.detach().requires_grad_() for t in inputs]
    out = fn(*leaves, **kwargs)
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"flash_attention should return a tensor, got {type(out).__name__}")
    out.backward(grad)
    return (out.detach(), *(t.grad for t in leaves))


# ----------------------------------------------------------------------------- errors
def describe_exception(exc: BaseException, runtime_dirs) -> dict:
    """What the grader reports about an exception raised by student code: its type and text (with
    causes) and the innermost line of student code, as plain strings."""
    parts: list[str] = []
    seen: BaseException | None = exc
    while seen is not None and len(parts) < 8:
        parts.append(f"{type(seen).__name__}: {seen}")
        seen = seen.__cause__ or seen.__context__
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not any(str(d) in f.filename for d in runtime_dirs) and "-packages" not in f.filename
    ]
    where = None
    if frames:
        f = frames[-1]
        where = f"{Path(f.filename).parent.name}/{Path(f.filename).name}:{f.lineno}: {(f.line or '').strip()}"
    return {"type": type(exc).__name__, "text": "\n".join(parts)[:4000], "where": where}
