"""Checks for exercise 03: online softmax with the row log-sum-exp."""

import math

import torch

from common import reference
from common.compare import call, expect_close, expect_tensor, expect_tuple
from grader.checks.ex02_safe_softmax import SOFTMAX_BLOCKS, diagnose_softmax, near_1000
from grader.core import check

# The exercise: grader/exercises.py finds it from this module's name, ex<folder>.py.
TITLE = "online softmax"
MODULE = "online_softmax"
FUNCTIONS = ("online_softmax",)


def _online_case(impl, ctx, x, what):
    out = expect_tuple("online_softmax(x)", call(impl.online_softmax, x), 2)
    y, lse = out
    what = f"{what} [{x.shape[0]}, {x.shape[1]}] ({str(x.dtype)[6:]})"
    expect_tensor(f"y for {what}", y, x.shape, x.dtype)
    expect_tensor(f"lse for {what}", lse, x.shape[:1], torch.float32)
    y_ref, lse_ref = reference.online_softmax(x)
    y_lowp, lse_lowp = reference.online_softmax_lowp(x)
    # lse is float32 whatever the input dtype: its floor is float32's, so an error of 1 at lse = 1000 fails
    expect_close(
        f"lse for {what}", lse, lse_ref, lse_lowp, torch.float32, blocks=(16,), suspects=_lse_suspects(x, lse_ref)
    )
    expect_close(
        f"y for {what}", y, y_ref, y_lowp, x.dtype, blocks=(1, 128), suspects=_y_suspects(x), diagnose=diagnose_softmax
    )


def _unrescaled_denominator(x, block):
    """l as computed when the old l is not multiplied by exp(m_old - m_new) when the max grows."""
    m = torch.full(x.shape[:1], -math.inf, dtype=torch.float64, device=x.device)
    l = torch.zeros_like(m)
    for start in range(0, x.shape[1], block):
        m_new = torch.maximum(m, x[:, start : start + block].max(-1).values)
        l = l + torch.exp(x[:, start : start + block] - m_new[:, None]).sum(-1)
        m = m_new
    return m, l


def _y_suspects(x):
    x64 = x.double()
    suspects = {}
    for block in SOFTMAX_BLOCKS:
        if block < x.shape[1]:
            m, l = _unrescaled_denominator(x64, block)
            suspects[
                f"l is not rescaled by exp(m_old - m_new) when the running max grows (block of {block} columns)"
            ] = torch.exp(x64 - m[:, None]) / l[:, None]
    return suspects


def _lse_suspects(x, lse_ref):
    suspects = {
        "lse is in base 2 (log2 instead of the natural log)": lse_ref / math.log(2),
        "lse is only log(l), without the running max m added back": lse_ref - x.double().max(-1).values,
    }
    for block in SOFTMAX_BLOCKS:
        if block < x.shape[1]:
            m, l = _unrescaled_denominator(x.double(), block)
            suspects[
                f"l is not rescaled by exp(m_old - m_new) when the running max grows (block of {block} columns)"
            ] = m + torch.log(l)
    return suspects


@check(points=2)
def short_rows(impl, ctx):
    """rows shorter than one block: y and lse"""
    _online_case(impl, ctx, ctx.randn((8, 50), torch.float32, "short"), "x")


@check(points=3)
def long_rows(impl, ctx):
    """several column blocks with a growing max: the rescaled running denominator"""
    for i, cols in enumerate((1000, 129, 4097 if ctx.gpu else 257)):
        x = ctx.randn((5, cols), torch.float32, f"long{i}", scale=3.0)
        x += torch.linspace(0, 20, cols, device=x.device)  # the max keeps growing block after block
        _online_case(impl, ctx, x, "x")


@check(points=2)
def lse_convention(impl, ctx):
    """lse is the natural-log log-sum-exp, float32, one value per row"""
    _online_case(impl, ctx, ctx.randn((7, 90), torch.float32, "lse", scale=2.0), "x")


@check(points=2)
def large_values_fp16(impl, ctx):
    """inputs near 1000, fp32 and fp16"""
    for dtype in (torch.float32, torch.float16):
        _online_case(impl, ctx, near_1000(ctx, dtype), "x + 1000")


@check(points=1)
def negative_infinity(impl, ctx):
    """-inf entries; an all -inf row gives y = 0 and lse = -inf"""
    x = ctx.randn((4, 200), torch.float32, "ninf")
    x[0, 100:] = float("-inf")
    x[1, :150] = float("-inf")  # the first blocks have nothing finite
    x[2] = float("-inf")
    _online_case(impl, ctx, x, "x with -inf entries")


CHECKS = [short_rows, long_rows, lse_convention, large_values_fp16, negative_infinity]
