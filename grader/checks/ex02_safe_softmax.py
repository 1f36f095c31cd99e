"""Checks for exercise 02: safe softmax."""

import torch

from common import reference
from common.compare import call, expect_close, expect_tensor, rows_wrong, span
from grader.core import check

# The exercise: grader/exercises.py finds it from this module's name, ex<folder>.py.
TITLE = "safe softmax"
MODULE = "safe_softmax"
FUNCTIONS = ("softmax",)

SOFTMAX_BLOCKS = (32, 64, 128, 256, 512)


def near_1000(ctx, dtype):
    """Rows of values near 1000: exp overflows there unless the row's max is subtracted first."""
    return (ctx.randn((4, 300), torch.float32, f"large{dtype}", scale=2.0) + 1000).to(dtype)


def _softmax_case(impl, ctx, x, what):
    y = call(impl.softmax, x)
    what = f"softmax of {what} [{x.shape[0]}, {x.shape[1]}] ({str(x.dtype)[6:]})"
    expect_tensor(what, y, x.shape, x.dtype)
    expect_close(
        what,
        y,
        reference.softmax(x),
        reference.softmax_lowp(x),
        x.dtype,
        blocks=(1, 128),
        suspects=_suspects(x),
        diagnose=diagnose_softmax,
    )


def _suspects(x):
    """What common bugs output: a sum over the first column block only; no max subtracted."""
    x64 = x.double()
    suspects = {}
    for block in SOFTMAX_BLOCKS:
        if block < x.shape[1]:
            shifted = torch.exp(x64 - x64.max(-1, keepdim=True).values)
            suspects[
                f"the sum (or max) covers only the first block of {block} columns: loop over all "
                "column blocks in every pass"
            ] = shifted / shifted[:, :block].sum(-1, keepdim=True)
    n = x.shape[1]
    row_max = x64.max(-1, keepdim=True).values
    for block in (128, 256, 512, 64, 32):  # the lesson's block first
        pad = -n % block
        if not pad:
            continue
        for m in (row_max, row_max.clamp(min=0)):  # the max pass with or without the padding's zeros
            e = torch.exp(x64 - m)
            suspects[
                "padded columns (c >= n_cols) count in the sum: they are loaded with other=0.0, so each adds "
                "exp(0 - m) to the denominator (as with BLOCK={block}). Load them with other=-inf: exp(-inf) = 0".replace(
                    "{block}", str(block)
                )
            ] = e / (e.sum(-1, keepdim=True) + pad * torch.exp(-m))
    return suspects


def diagnose_softmax(m):
    nan_rows = torch.isnan(m.out).any(-1)
    empty_rows = torch.isneginf(m.ref).all(-1) | (m.ref == 0).all(-1)
    if (nan_rows & empty_rows).any():
        return (
            f"rows {span(nan_rows & empty_rows)} are entirely -inf and came out NaN: with m = -inf, "
            "exp(x - m) is exp(nan); shift by 0 when m is -inf and divide by 1 when the sum is 0"
        )
    if nan_rows.any():
        return (
            f"rows {span(nan_rows)} contain NaN: exp of large inputs overflows to inf unless the row max "
            "is subtracted first (inf / inf = NaN)"
        )
    rows, cols = rows_wrong(m, -2), rows_wrong(m, -1)
    where = f"(wrong rows: {span(rows)}; wrong columns: {span(cols)})"
    totals = m.out.nan_to_num(0).sum(-1)
    if ((totals - 1).abs() > 10 * m.tolerance * m.out.shape[-1] ** 0.5).any() and not torch.isneginf(m.ref).all(
        -1
    ).any():
        return (
            f"the rows do not sum to 1 {where}: the sum and the outputs disagree. Every pass must visit every "
            "column block with the same max m, and padded columns must load other=-inf so they add 0"
        )
    return (
        f"no known bug matches this pattern {where}: compare your three passes (max, sum, write) with the "
        "lesson's; each must loop over every column block, with the mask c < n_cols"
    )


@check(points=2)
def short_rows(impl, ctx):
    """rows shorter than one block, including a column-strided view"""
    _softmax_case(impl, ctx, ctx.randn((8, 50), torch.float32, "short"), "x")
    wide = ctx.randn((6, 2 * 77), torch.float32, "strided")
    _softmax_case(impl, ctx, wide[:, ::2], "every other column of x")


@check(points=3)
def long_rows(impl, ctx):
    """rows spanning several column blocks, lengths not multiples of the block"""
    for i, cols in enumerate((1000, 129, 4097 if ctx.gpu else 257)):
        _softmax_case(impl, ctx, ctx.randn((5, cols), torch.float32, f"long{i}", scale=3.0), "x")


@check(points=2)
def large_values(impl, ctx):
    """inputs near 1000 (exp would overflow without subtracting the max), fp32 and fp16"""
    for dtype in (torch.float32, torch.float16):
        _softmax_case(impl, ctx, near_1000(ctx, dtype), "x + 1000")


@check(points=1)
def fp16_io(impl, ctx):
    """float16 in and out"""
    _softmax_case(impl, ctx, ctx.randn((16, 700), torch.float16, "fp16"), "x")


@check(points=2)
def negative_infinity(impl, ctx):
    """-inf entries get probability 0; an all -inf row gives zeros, not NaN"""
    x = ctx.randn((4, 200), torch.float32, "ninf")
    x[0, 100:] = float("-inf")  # a masked tail
    x[1, ::3] = float("-inf")
    x[2] = float("-inf")  # nothing to attend to
    _softmax_case(impl, ctx, x, "x with -inf entries")


CHECKS = [short_rows, long_rows, large_values, fp16_io, negative_infinity]
