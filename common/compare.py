"""Calling untrusted student functions and comparing their outputs, with diagnoses that teach."""

import math
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from common.tolerance import allowed_error


class CheckFailed(Exception):
    """A check failed; the message is for the student."""


# ----------------------------------------------------------------------------- calling
_ALLOCATORS = ("empty", "empty_like", "empty_strided")
GUARD_VALUE = 12345.0  # fills the guard zones around outputs; any other value there was stored by a kernel


@dataclass
class GuardedOutput:
    """A tensor made by torch.empty* during a student call, inside a larger buffer whose guard zones
    before and after it catch stores that miss the tensor."""

    tensor: torch.Tensor
    buffer: torch.Tensor  # 1-D: [guard | the tensor's span | guard]
    guard: int

    def stray_stores(self) -> tuple:
        """(elements changed before the tensor, elements changed after it)."""
        changed = self.buffer != torch.tensor(GUARD_VALUE, dtype=self.buffer.dtype, device=self.buffer.device)
        return int(changed[: self.guard].sum()), int(changed[len(self.buffer) - self.guard:].sum())


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
    """Make every floating-point tensor of torch.empty* NaN-filled (so unwritten outputs show) and
    surrounded by guard zones (so stores outside it are caught, not left to corrupt memory).
    Yields the list of GuardedOutput made inside the block."""
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


def _expect_no_stray_stores(made) -> None:
    for output in made:
        before, after = output.stray_stores()
        if before or after:
            where = " and ".join(f"{n} elements {side}" for n, side in ((before, "before its start"),
                                                                     (after, "past its end")) if n)
            raise CheckFailed(
                f"your kernel stored outside its output tensor of shape {tuple(output.tensor.shape)}: {where}. "
                "A store needs a mask for the last, partial block (rows or columns >= the size), and offsets "
                "built from the right strides; on a GPU such a store corrupts other memory or crashes."
            )


@contextmanager
def counted_kernel_launches():
    """Count Triton kernel launches (compiled or interpreted) made inside the block: yields a list
    whose length is the count."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    launches, originals = [], {cls: cls.run for cls in (JITFunction, InterpretedFunction)}

    def counting(run):
        def run_counted(self, *args, **kwargs):
            if not kwargs.get("warmup"):
                launches.append(self)
            return run(self, *args, **kwargs)

        return run_counted

    for cls, run in originals.items():
        cls.run = counting(run)
    try:
        yield launches
    finally:
        for cls, run in originals.items():
            cls.run = run


def call(fn, *args, **kwargs):
    """Run a student function with guarded, NaN-filled allocations; check that it launched a Triton
    kernel, stored nothing outside its outputs and left its inputs unchanged."""
    inputs = {f"argument {i + 1}": a for i, a in enumerate(args)} | kwargs
    snapshots = {name: t.clone() for name, t in inputs.items() if isinstance(t, torch.Tensor)}
    with guarded_allocations() as made, counted_kernel_launches() as launches:
        out = fn(*args, **kwargs)
    if not launches:
        raise CheckFailed(
            f"{getattr(fn, '__name__', 'your function')} returned without launching a Triton kernel: "
            "the exercise is to compute the result in your kernel (PyTorch-only answers earn no points)"
        )
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    _expect_no_stray_stores(made)
    for name, before in snapshots.items():
        if not torch.equal(before.nan_to_num(), inputs[name].nan_to_num()):
            raise CheckFailed(
                f"your function changed its input ({name}) in place; inputs must come back "
                "unmodified (did a kernel store into an input pointer?)"
            )
    return out


def expect_tensor(what: str, out, shape, dtype) -> None:
    if not isinstance(out, torch.Tensor):
        raise CheckFailed(f"{what} should be a torch.Tensor, got {type(out).__name__}")
    if tuple(out.shape) != tuple(shape):
        raise CheckFailed(f"{what} has shape {tuple(out.shape)}, expected {tuple(shape)}")
    if out.dtype != dtype:
        raise CheckFailed(f"{what} has dtype {out.dtype}, expected {dtype}")


def expect_tuple(what: str, out, length: int) -> tuple:
    if not isinstance(out, (tuple, list)) or len(out) != length:
        raise CheckFailed(f"{what} should return a tuple of {length} tensors, got {type(out).__name__}")
    return tuple(out)


# ----------------------------------------------------------------------------- comparing
@dataclass
class Mismatch:
    """Where an output differs from its reference; handed to exercise-specific diagnoses."""

    out: torch.Tensor  # float64, CPU
    ref: torch.Tensor  # float64, CPU
    wrong: torch.Tensor  # bool, True where the element is out of tolerance (or NaN)
    tolerance: float
    blocks: tuple  # tile sizes of the trailing dimensions

    def tiles(self) -> torch.Tensor:
        """Per-tile flag over the trailing dims: True where any element of the tile is wrong."""
        wrong = self.wrong.reshape(-1, *self.wrong.shape[-len(self.blocks):]).any(0)
        for dim, size in enumerate(self.blocks):
            wrong = _pad_to(wrong, dim, size)
            wrong = wrong.unflatten(dim, (-1, size)).any(dim + 1)
        return wrong


def _pad_to(t: torch.Tensor, dim: int, size: int) -> torch.Tensor:
    extra = -t.shape[dim] % size
    if extra == 0:
        return t
    pad_shape = list(t.shape)
    pad_shape[dim] = extra
    return torch.cat([t, t.new_zeros(pad_shape)], dim)


def _index(flat: int, shape) -> tuple:
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(shape)))


def _tile_summary(m: Mismatch) -> str:
    tiles = m.tiles()
    hit = tiles.nonzero().tolist()
    names = " x ".join(str(b) for b in m.blocks)
    shown = ", ".join(str(tuple(t)) for t in hit[:8]) + (", ..." if len(hit) > 8 else "")
    kind = "(row block, column block)" if len(m.blocks) == 2 else "(row block)"
    return f"wrong in {len(hit)} of {tiles.numel()} tiles of {names} {kind}: {shown}"


def expect_close(what, out, ref, lowp, dtype, blocks=(64, 64), suspects=None, diagnose=None):
    """Fail with a diagnosis unless `out` is within the tolerance policy of `ref`.

    ref is the float64 reference, lowp the same computation by plain PyTorch; `dtype` is the
    precision of the output (it sets the tolerance floor: float32 for lse, whatever the inputs).
    suspects maps a likely cause ("the scale is applied twice") to what a kernel with that bug
    would output; diagnose(mismatch) may return extra, exercise-specific advice.
    """
    ref = ref.detach().double().cpu()
    got = out.detach().double().cpu()
    tolerance = allowed_error(ref, lowp.detach().cpu(), dtype)
    wrong = _wrong(got, ref, tolerance)
    if not wrong.any():
        return
    m = Mismatch(got, ref, wrong, tolerance, blocks)
    lines = [f"{what}: {_first_error(m)}", _tile_summary(m)]
    nan = torch.isnan(got) & ~torch.isnan(ref)
    if nan.any():
        lines.append(
            f"{int(nan.sum())} elements are NaN (first at index {_index(int(nan.flatten().nonzero()[0]), got.shape)}). "
            "Outputs are filled with NaN before your call, so NaN means an element was never written "
            "(store mask, grid too small) or was computed as NaN (exp(-inf - (-inf)), 0/0)."
        )
    for cause, wrong_output in (suspects or {}).items():
        if _matches(got, wrong_output.detach().double().cpu(), ref, tolerance):
            lines.append(f"Likely cause: {cause} (your output matches what that bug produces).")
            break
    else:
        advice = diagnose(m) if diagnose else None
        if advice:
            lines.append(f"Likely cause: {advice}")
    raise CheckFailed("\n".join(lines))


def _matches(got, wrong_output, ref, tolerance) -> bool:
    """Whether `got` is what a bug computing `wrong_output` would give. A bug's output is often far
    larger than the right one (which may even be 0), so the allowance grows with its size, and
    doubles: this names a cause, it grades nothing."""
    size = max(1.0, _largest_finite(wrong_output)) / max(1.0, _largest_finite(ref))
    return not _wrong(got, wrong_output, 2 * tolerance * size).any()


def _largest_finite(t) -> float:
    finite = t[torch.isfinite(t)].abs()
    return float(finite.max()) if finite.numel() else 0.0


def _wrong(got, ref, tolerance):
    same_nonfinite = (got == ref) & ~torch.isfinite(ref)  # e.g. lse = -inf for an empty row
    return ~((got - ref).abs() <= tolerance) & ~same_nonfinite


def _first_error(m: Mismatch) -> str:
    err = (m.out - m.ref).abs().nan_to_num(nan=math.inf)
    err[~m.wrong] = 0
    flat = int(err.flatten().argmax())
    i = _index(flat, m.out.shape)
    return (
        f"{int(m.wrong.sum())} of {m.wrong.numel()} elements out of tolerance; worst at index {i}: "
        f"got {m.out[i].item():.6g}, expected {m.ref[i].item():.6g} "
        f"(allowed error {m.tolerance:.3g})"
    )


def rows_wrong(m: Mismatch, dim: int) -> torch.Tensor:
    """Flags over dimension `dim` (e.g. rows: -2): True where any element along it is wrong."""
    other = [d for d in range(m.wrong.dim()) if d != dim % m.wrong.dim()]
    return m.wrong.permute(*other, dim % m.wrong.dim()).reshape(-1, m.wrong.shape[dim]).any(0)


def span(flags: torch.Tensor) -> str:
    """'64..99' style description of the True indices of a 1-D flag tensor."""
    idx = flags.nonzero().flatten().tolist()
    if not idx:
        return "none"
    if idx == list(range(idx[0], idx[-1] + 1)):
        return f"{idx[0]}..{idx[-1]}" if len(idx) > 1 else str(idx[0])
    return ", ".join(map(str, idx[:10])) + (", ..." if len(idx) > 10 else "")


def constant_factor(m: Mismatch):
    """c when the output is c times the reference everywhere (c clearly not 1), else None.

    A constant factor points at a missing or extra scale (sm_scale, log2(e), ln 2, a normalisation).
    """
    finite = torch.isfinite(m.ref) & torch.isfinite(m.out)
    ref, out = m.ref[finite], m.out[finite]
    if ref.numel() == 0 or float((ref * ref).sum()) == 0.0:
        return None
    c = float((out * ref).sum() / (ref * ref).sum())
    if not math.isfinite(c) or abs(c - 1.0) < 1e-3:
        return None
    return c if bool(((out - c * ref).abs() <= m.tolerance * max(1.0, abs(c))).all()) else None
