"""Calling student functions and comparing their outputs, with diagnoses that teach."""

import math
from dataclasses import dataclass

import torch

from common.tolerance import allowed_error


class CheckFailed(Exception):
    """A check failed; the message is for the student."""


# ----------------------------------------------------------------------------- calling
def call(fn, *args, **kwargs):
    """Run a student function guarded (grader.loader.StudentFunction.guarded): NaN-filled outputs
    between guard zones, a Triton kernel launched, nothing computed by PyTorch, inputs unchanged."""
    return fn.guarded(*args, **kwargs)


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
        wrong = self.wrong.reshape(-1, *self.wrong.shape[-len(self.blocks) :]).any(0)
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
            "(store mask, grid too small), was computed as NaN (exp(-inf - (-inf)), 0/0, inf - inf), or was "
            "computed from memory read outside an input (a load without its mask)."
        )
    for cause, wrong_output in (suspects or {}).items():
        if _matches(got, wrong_output.detach().double().cpu(), ref, tolerance):
            lines.append(f"Likely cause: {cause} (your output matches what that bug produces).")
            break
    else:
        advice = slices_advice(wrong, got) or (diagnose(m) if diagnose else None)
        if advice:
            lines.append(f"Likely cause: {advice}")
        else:
            lines.append(
                "No known bug matches this pattern: compare the wrong tiles above with the map of the "
                "kernel in the lesson, and test that region alone at a small size."
            )
    raise CheckFailed("\n".join(lines))


_OFFSETS = "Use off_b = pid // H and off_h = pid % H, and base = off_b * stride_b + off_h * stride_h for every tensor"


def slices_advice(wrong: torch.Tensor, out: torch.Tensor = None):
    """A cause when the errors follow whole (batch, head) slices of a [B, H, N, d] output: some slices
    right and the others wrong, or some never written (all NaN) and the others written: the programs
    work on the wrong (batch, head)."""
    if wrong.dim() != 4 or wrong.shape[0] * wrong.shape[1] < 2:
        return None
    if out is not None:
        nan = torch.isnan(out).flatten(2)
        unwritten = nan.all(-1)  # [B, H]
        if unwritten.any() and not unwritten.all():
            never = [tuple(i) for i in unwritten.nonzero().tolist()]
            return (
                f"the (batch, head) slices {', '.join(map(str, never[:6]))}{', ...' if never[6:] else ''} were "
                "never written (all NaN) while the others were: the programs of those slices read and write "
                f"another (batch, head). {_OFFSETS}"
            )
    per = wrong.flatten(2).any(-1)  # [B, H]
    if per.all() or not per.any():
        return None
    bad = [tuple(i) for i in per.nonzero().tolist()]
    return (
        f"only some (batch, head) slices are wrong ({', '.join(map(str, bad[:6]))}{', ...' if bad[6:] else ''}; "
        f"the others are right): each program reads or writes the wrong (batch, head). {_OFFSETS}"
    )


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
