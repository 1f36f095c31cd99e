"""Checks for exercise 05: delta = rowsum(dO * O), the backward pass's preprocessing step."""

import torch

from common import inputs, reference
from common.compare import CheckFailed, call, expect_close, expect_tensor, rows_wrong, span
from grader.checks import BLOCK_GUESSES
from grader.core import check
from grader.sandbox import raised

# The exercise: grader/exercises.py finds it from this module's name, ex<folder>.py.
TITLE = "backward preprocess (delta)"
MODULE = "backward_preprocess"
FUNCTIONS = ("attention_backward_preprocess",)

ROWS = 32  # rows per program in the tile summaries (the interpreter config's BLOCK_M)


def _delta_case(impl, ctx, N, d, tag, dtype=torch.float16, strided=(), B=2, H=3):
    """Check delta for o, do [B, H, N, d]; `strided` names which of "o", "do" are [B, N, H, d] views."""
    o = ctx.randn((B, H, N, d), dtype, f"{tag}.o")
    do = ctx.randn((B, H, N, d), dtype, f"{tag}.do")
    o, do = (inputs.strided_view(t) if name in strided else t for name, t in (("o", o), ("do", do)))
    flags = [str(dtype)[6:]] + [f"{name} a strided view" for name in strided]
    what = f"delta for o, do [{B}, {H}, {N}, {d}] ({', '.join(flags)})"
    try:
        delta = call(impl.attention_backward_preprocess, o, do)
    except Exception as exc:  # noqa: BLE001 - only a shape clash gets advice; the rest goes to the runner
        if "incompatible dimensions" not in str(exc) and "Cannot broadcast" not in str(exc):
            raise
        raise CheckFailed(
            f"{what}: your kernel raised {raised(exc)}\nLikely cause: the row sums do not have one "
            "value per row: tl.sum(x, axis=1) of a [BLOCK_M, HEAD_DIM] tile gives [BLOCK_M] (one per row, what "
            "delta needs); axis=0 gives [HEAD_DIM], which clashes with the BLOCK_M row offsets of the store"
        ) from None
    expect_tensor(what, delta, (B, H, N), torch.float32)
    # delta is float32 whatever the inputs: the products of fp16 or bf16 values are exact in fp32, so
    # plain PyTorch's fp32 sum is the bar and the floor is float32's: a sum kept in fp16 fails.
    expect_close(
        what,
        delta,
        reference.attention_delta(o, do),
        reference.attention_delta_lowp(o, do),
        torch.float32,
        blocks=(ROWS,),
        suspects=_suspects(o, do),
        diagnose=lambda m: _diagnose(m, N, dtype),
    )


def _dense(t):
    return torch.as_strided(t, t.shape, torch.empty(t.shape, device="meta").stride())


def _suspects(o, do):
    o64, do64 = o.double(), do.double()
    N, d = o.shape[-2:]
    out = {}
    for b in BLOCK_GUESSES:
        if b == d:  # tl.sum over axis 0 only compiles when the tile is square
            rows = torch.arange(N, device=o.device)
            blocks = o64.new_zeros(*o.shape[:2], -(-N // b) * b, d)
            blocks[..., :N, :] = o64 * do64
            col_sums = blocks.unflatten(-2, (-1, b)).sum(-2)  # [B, H, blocks, d]: each column summed over rows
            out[
                f"the tile is summed over its rows (axis=0) instead of along the head dimension (axis=1), as with "
                f"BLOCK_M={b}"
            ] = col_sums.flatten(-2)[..., rows]
    if not o.is_contiguous() or not do.is_contiguous():
        out[
            "the strides are ignored: o and do are read as if contiguous [B, H, N, d]; address o[b, h, n, c] as "
            "o_ptr + b * stride_ob + h * stride_oh + n * stride_on + c * stride_od"
        ] = (_dense(o).double() * _dense(do).double()).sum(-1)
    if o.stride() != do.stride():
        out["do is read with o's strides: each tensor has its own four strides"] = (
            o64 * torch.as_strided(do, do.shape, o.stride()).double()
        ).sum(-1)
        out["o is read with do's strides: each tensor has its own four strides"] = (
            torch.as_strided(o, o.shape, do.stride()).double() * do64
        ).sum(-1)
    return out


def _diagnose(m, N, dtype):
    nan = torch.isnan(m.out).flatten(0, -2)  # [(batch, head), N]
    if nan.any():
        if nan[1:].all() and not nan[0].all():
            return (
                "only the first (batch, head) was written: every program stores into the first head's rows. "
                "Offset the store by bh * N (delta is contiguous [B, H, N])"
            )
        rows = nan.any(0)
        return (
            f"rows {span(rows)} were never written: check the store mask (rows < N, not the last full "
            "block) and that every row block gets a program"
        )
    relative = float((m.out - m.ref).abs().max()) / max(1.0, float(m.ref.abs().max()))
    if dtype != torch.float32 and relative < 1e-2:
        return (
            f"the errors are small (at most {relative:.1e} of the largest delta) but above float32 rounding: "
            f"the products are summed in {str(dtype)[6:]}. Convert o and do to float32 before multiplying"
        )
    if m.wrong.all():
        return "every row is wrong: check the pointer arithmetic (strides), the product and the axis of the sum"
    rows = rows_wrong(m, -1)  # per position i along N, over all (batch, head)
    heads = m.wrong.flatten(0, -2).any(-1)  # per (batch, head)
    if not heads[0] and heads[1:].any():
        return (
            "the first (batch, head) is right but later ones are wrong: check the (batch, head) offsets of o "
            "and do (b * stride_ob + h * stride_oh, in 64-bit) and of delta (bh * N)"
        )
    last = (N - 1) // ROWS * ROWS
    if last > 0 and not rows[:last].any():
        return (
            f"only the last rows are wrong ({span(rows)}): check the masks that involve N in the last block "
            "(loads with other=0.0, the store)"
        )
    return None


@check(points=2)
def aligned(impl, ctx):
    """delta for N a multiple of the block, d = 64"""
    _delta_case(impl, ctx, 1024 if ctx.gpu else 128, 64, "aligned")


@check(points=3)
def ragged(impl, ctx):
    """delta for N = 1, 17, 100, 129 and a larger N (rows past N masked)"""
    for i, N in enumerate((1, 17, 100, 129) + ((3000,) if ctx.gpu else (300,))):
        _delta_case(impl, ctx, N, 64, f"ragged{i}")


@check(points=2)
def head_dims(impl, ctx):
    """delta for head dims d = 16, 32, 128 (and fp32 inputs)"""
    for i, d in enumerate((16, 32, 128)):
        _delta_case(impl, ctx, 100, d, f"dims{i}")
    _delta_case(impl, ctx, 100, 64, "fp32", dtype=torch.float32)


@check(points=2)
def strided_inputs(impl, ctx):
    """o and/or do stored as [B, N, H, d] and viewed as [B, H, N, d] (each with its own strides)"""
    _delta_case(impl, ctx, 129, 64, "strided_o", strided=("o",))
    _delta_case(impl, ctx, 129, 64, "strided_both", strided=("o", "do"))


@check(points=1, gpu_only=True)
def bf16_inputs(impl, ctx):
    """delta for bfloat16 inputs, many heads (GPU only)"""
    _delta_case(impl, ctx, 1000, 128, "bf16", dtype=torch.bfloat16)
    _delta_case(impl, ctx, 2048, 64, "heads", B=4, H=32)


CHECKS = [aligned, ragged, head_dims, strided_inputs, bf16_inputs]
