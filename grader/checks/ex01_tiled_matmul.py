"""Checks for exercise 01: tiled matmul."""

import torch

from common import reference
from common.compare import call, expect_close, expect_tensor, rows_wrong, span
from grader.core import check

# The exercise: grader/exercises.py finds it from this module's name, ex<folder>.py.
TITLE = "tiled matmul"
MODULE = "matmul"  # the student's file: 01_tiled_matmul/matmul.py
FUNCTIONS = ("matmul",)  # what the checks call

BLOCK_K_GUESSES = (16, 32, 64, 128)


def _multiply(impl, ctx, M, K, N, dtype, tag, transposed=False, positive=False):
    if transposed:  # store a as [K, M] and b as [N, K], then view them transposed without a copy
        a = ctx.randn((K, M), dtype, f"{tag}.a").t()
        b = ctx.randn((N, K), dtype, f"{tag}.b").t()
    else:
        a = ctx.randn((M, K), dtype, f"{tag}.a")
        b = ctx.randn((K, N), dtype, f"{tag}.b")
    if positive:  # every product adds: the running sum grows to about 0.64 K
        a, b = a.abs(), b.abs()
    c = call(impl.matmul, a, b)
    what = (
        f"matmul of a [{M}, {K}] by b [{K}, {N}] ({str(dtype)[6:]}{', transposed views' if transposed else ''}"
        f"{', positive entries' if positive else ''})"
    )
    expect_tensor(what, c, (M, N), dtype)
    expect_close(
        what,
        c,
        reference.matmul(a, b),
        _lowp(a, b),
        dtype,
        suspects=_suspects(a, b, transposed),
        diagnose=lambda m: _diagnose(m, K),
    )


def _lowp(a, b):
    """PyTorch's own product in the same precision. On a GPU, tl.dot multiplies fp32 in TF32 by
    default: the allowance is then measured against TF32 arithmetic, so the default passes."""
    if a.is_cuda and a.dtype == torch.float32:
        return reference.matmul_tf32(a, b)
    return reference.matmul_lowp(a, b)


def _suspects(a, b, transposed):
    K = a.shape[1]
    found = {}
    for block_k in BLOCK_K_GUESSES:
        whole = K - K % block_k
        if 0 < K % block_k and whole not in found:
            found[whole] = (
                f"the last K step is dropped or masked away (K={K} is not a multiple of "
                f"BLOCK_K={block_k}): loop to K itself and mask k < K",
                reference.matmul(a[:, :whole], b[:whole]),
            )
    suspects = dict(found.values())
    if transposed:
        flat_a, flat_b = (torch.as_strided(t, t.shape, (t.shape[1], 1)) for t in (a, b))
        advice = (
            "the strides are ignored: {} read as if contiguous; address a[i, k] as "
            "a_ptr + i * stride_am + k * stride_ak (and b likewise)"
        )
        for names, x, y in (("a and b are", flat_a, flat_b), ("a is", flat_a, b), ("b is", a, flat_b)):
            suspects[advice.format(names)] = reference.matmul(x, y)
    return suspects


def _diagnose(m, K):
    if K >= 1024 and not torch.isnan(m.out).any():
        err = (m.out - m.ref).abs()
        if float(err.max()) < 0.05 * float(m.ref.abs().max()):
            return (
                f"small errors that grow with K={K}: the sum is kept in low precision. Accumulate in float32 "
                "(acc = tl.zeros(..., dtype=tl.float32); acc += tl.dot(a, b)) and convert to the output's "
                "dtype once, at the store"
            )
    everywhere = m.tiles().all() and m.wrong.double().mean() > 0.5  # a few may land near the right value by chance
    if everywhere and any(K % b for b in BLOCK_K_GUESSES):
        garbage = bool((~torch.isfinite(m.out)).any())
        return (
            f"the loads are not masked along K (K={K} is not a multiple of BLOCK_K): in the last K step, "
            "a[i, k] and b[k, j] with k >= K read memory outside the inputs (the next rows, or past the end"
            + (": here inf or NaN" if garbage else "")
            + ") and add it to every element. Mask both loads "
            "with k < K as well as rows < M and cols < N, other=0.0"
        )
    if everywhere:
        return (
            "nearly every element is wrong, in every tile, although K is a multiple of the blocks: the tiles "
            "are addressed wrongly. Check a's pointers (rows * stride_am + k * stride_ak), b's (k * stride_bk "
            "+ cols * stride_bn) and that the K loop advances k by BLOCK_K"
        )
    bad_rows, bad_cols = rows_wrong(m, -2), rows_wrong(m, -1)
    if _is_tail(bad_rows) or _is_tail(bad_cols):
        return (
            f"only rows {span(bad_rows)} / columns {span(bad_cols)} are wrong, at the end: check the "
            "load and store masks of the last row and column blocks (M or N not a multiple of the block)"
        )
    return None


def _is_tail(flags):
    """True when the flagged indices are a proper, non-empty suffix."""
    idx = flags.nonzero().flatten()
    return 0 < len(idx) < len(flags) and int(idx[0]) + len(idx) == len(flags)


@check(points=2)
def aligned_fp32(impl, ctx):
    """float32, every size a multiple of the blocks"""
    size = 512 if ctx.gpu else 128
    _multiply(impl, ctx, size, size, size, torch.float32, "aligned")


@check(points=3)
def ragged_shapes(impl, ctx):
    """M, N, K not multiples of the blocks (masked loads and stores)"""
    shapes = [(100, 70, 33), (1, 17, 1), (65, 129, 64)] + ([(1000, 999, 1001)] if ctx.gpu else [])
    for i, (M, K, N) in enumerate(shapes):
        _multiply(impl, ctx, M, K, N, torch.float32, f"ragged{i}")


@check(points=2)
def fp16_inputs(impl, ctx):
    """float16 inputs: fp32 accumulation (a long K = 4096 reduction included), fp16 output"""
    M, K, N = (2048, 1500, 1024) if ctx.gpu else (96, 200, 80)  # K is no multiple of BLOCK_K
    _multiply(impl, ctx, M, K, N, torch.float16, "fp16")
    # A long reduction whose running sum grows large: fp16 accumulation loses several units there.
    _multiply(impl, ctx, 16, 4096, 16, torch.float16, "fp16long", positive=True)


@check(points=2)
def transposed_views(impl, ctx):
    """non-contiguous inputs (transposed views): use the strides"""
    _multiply(impl, ctx, 70, 90, 50, torch.float32, "transposed", transposed=True)
    _multiply(impl, ctx, 64, 64, 64, torch.float16, "transposed16", transposed=True)


@check(points=1)
def many_tiles(impl, ctx):
    """a grid of many programs, tall and wide"""
    M, K, N = (4096, 250, 3000) if ctx.gpu else (320, 48, 200)  # K not a multiple of any BLOCK_K
    _multiply(impl, ctx, M, K, N, torch.float16, "tiles")


CHECKS = [aligned_fp32, ragged_shapes, fp16_inputs, transposed_views, many_tiles]
