"""Checks for exercise 06: dK and dV of the FlashAttention backward pass (see checks/backward.py
for the cases, the bug simulator and the probe it shares with exercise 07)."""

import torch

from common.compare import call, constant_factor, expect_tensor, expect_tuple, rows_wrong, span
from grader.checks.backward import (BLOCK_GUESSES, BackwardCase, classify_map, common_suspects, expect_grad,
                                    is_close, nan_advice, probe_width, scale_advice, visibility_map)
from grader.core import check

KEYS = 64  # keys per program in tile summaries and maps (exercise 06's interpreter BLOCK_N)


def _dkdv_suspects(case, which):
    out = common_suspects(case, which, "dK")
    N, i, j = case.N, torch.arange(case.N)[:, None], torch.arange(case.N)[None, :]
    dropped = {}
    for b in BLOCK_GUESSES:
        if case.causal and b < 2 * N:
            out[f"the diagonal query blocks are not masked (as with BLOCK_N={b}): queries i < j inside the "
                "diagonal blocks must get P = 0"] = case.simulate(see=i >= j // b * b)[which]
            out[f"the diagonal query blocks are skipped (as with BLOCK_N={b}): the causal walk starts at the "
                "query block holding row start_n and masks the blocks that cross the diagonal"] = case.simulate(
                see=(j <= i) & (i >= (j // b + 1) * b))[which]
        if not case.causal and N % b and N - N % b not in dropped:
            dropped[N - N % b] = (f"the last query block is skipped when N is not a multiple of BLOCK_M (as with "
                                  f"BLOCK_M={b}): loop over query blocks up to N itself and mask the rows >= N",
                                  case.simulate(see=(i < N - N % b).expand(N, N))[which])
    out.update(dropped.values())
    return out


# ----------------------------------------------------------------------------- comparing, with diagnoses
def _diagnose_dkdv(impl, case, name, other_ok, m):
    if torch.isnan(m.out).any():
        return nan_advice(case, name)
    factor = constant_factor(m)
    if factor is not None:
        return scale_advice(case, name, factor)
    hints = []
    if name == "dK" and other_ok:
        hints.append("dV is right, so P (recomputed from lse) and the mask are right: the error is in dS or "
                     "the dK product. Check dP^T = V dO^T, dS^T = P^T * (dP^T - delta) with delta broadcast "
                     "along the query axis (delta[None, :] in the transposed tile), Q's pointers, and sm_scale")
    if name == "dV" and other_ok:
        hints.append("dK is right, so P must be right: check the dV product (P^T cast to dO's dtype, then "
                     "tl.dot with dO), dO's pointers and strides, and the dV store")
    bad_keys = rows_wrong(m, -2)
    last = (case.N - 1) // KEYS * KEYS
    if last > 0 and not bad_keys[:last].any():
        hints.append(f"only keys in the last key block are wrong (keys {span(bad_keys)}): check the masks "
                     "that involve N there (keys >= N, the store)")
    probe = probe_dkdv(impl, case)
    if probe:
        hints.append(probe)
    return "\n".join(hints) or None


# ----------------------------------------------------------------------------- the visibility probe
def probe_dkdv(impl, case):
    """Run the student's kernel with q = 0, lse = 0 and dO one-hot over query ranges.

    Then P = 1 on every pair the kernel treats as visible and dV[j, c] counts the visible queries of
    range c for key j: a map of which (key block, query range) regions are right.
    """
    B, H, N, d = case.q.shape
    width = probe_width(N, d)
    ranges = -(-N // width)
    zeros = torch.zeros(B, H, N, d, dtype=case.dtype, device=case.q.device)
    onehot = zeros.clone()
    onehot[..., torch.arange(N), torch.arange(N) // width] = 1
    lse = torch.zeros(B, H, N, dtype=torch.float32, device=case.q.device)
    try:
        _, dv = impl.attention_backward_dkdv(zeros, case.k, case.v, onehot, lse, lse.clone(), **case.kwargs)
    except Exception:  # noqa: BLE001 - the probe is advice only; the check has already failed
        return None
    got = dv.double().cpu()[..., :ranges]
    expected = (case.visible().double().transpose(0, 1) @ onehot[0, 0].double().cpu()[:, :ranges]).expand_as(got)
    if (got - expected).abs().max() <= 0.5:
        return ("the (query, key) pairs your kernel visits and masks are right (probed with q = 0): the error is "
                "in the values, not in the loop bounds or masks")
    return (classify_map(case, got, expected, width, "queries") + "\n"
            + visibility_map(got, expected, KEYS, width, "key", "query", "keys"))


# ----------------------------------------------------------------------------- running a case
def _dkdv_case(impl, ctx, N, d, causal, tag, **options):
    case = BackwardCase(ctx, 2, 3, N, d, causal, tag, **options)
    dk, dv = expect_tuple(f"attention_backward_dkdv for {case.what}",
                          call(impl.attention_backward_dkdv, *case.args, **case.kwargs), 2)
    expect_tensor(f"dk for {case.what}", dk, case.q.shape, case.dtype)
    expect_tensor(f"dv for {case.what}", dv, case.q.shape, case.dtype)
    dk_ok, dv_ok = is_close(case, dk, 1), is_close(case, dv, 2)
    blocks = (KEYS, case.q.shape[-1])
    expect_grad(case, "dV", dv, 2, blocks, lambda: _dkdv_suspects(case, 2),
                lambda m: _diagnose_dkdv(impl, case, "dV", dk_ok, m))
    expect_grad(case, "dK", dk, 1, blocks, lambda: _dkdv_suspects(case, 1),
                lambda m: _diagnose_dkdv(impl, case, "dK", dv_ok, m))


def _cases(impl, ctx, tag, cases, **options):
    """Check dK and dV for each (N, d, causal) of `cases`, with B=2, H=3."""
    for i, (N, d, causal) in enumerate(cases):
        _dkdv_case(impl, ctx, N, d, causal, f"{tag}{i}", **options)


# ----------------------------------------------------------------------------- checks
@check(points=3)
def aligned(impl, ctx):
    """dK, dV, non-causal, N a multiple of the blocks (several query and key blocks)"""
    _cases(impl, ctx, "aligned", [(512 if ctx.gpu else 128, 64, False)])


@check(points=4)
def ragged(impl, ctx):
    """dK, dV, non-causal, N = 1, 17, 100, 129 and a larger N (padded queries and keys)"""
    sizes = (1, 17, 100, 129) + ((1000,) if ctx.gpu else (200,))
    _cases(impl, ctx, "ragged", [(N, 64, False) for N in sizes])


@check(points=2)
def causal_one_block(impl, ctx):
    """dK, dV, causal, N <= 64 (one key block: only the diagonal)"""
    _cases(impl, ctx, "causal1_", [(N, 64, True) for N in (1, 17, 64)])


@check(points=5)
def causal_many_blocks(impl, ctx):
    """dK, dV, causal, N = 256, 100, 129 and a larger N (skipped, diagonal and unmasked query blocks)"""
    sizes = (256, 100, 129) + ((1000,) if ctx.gpu else (200,))
    _cases(impl, ctx, "causal", [(N, 64, True) for N in sizes])


@check(points=3)
def head_dims(impl, ctx):
    """dK, dV, head dims d = 16, 32, 128, causal and not"""
    _cases(impl, ctx, "dims", [(100, d, causal) for d in (16, 32, 128) for causal in (False, True)])


@check(points=2)
def strided_inputs(impl, ctx):
    """dK, dV, q/k/v/dO stored as [B, N, H, d] and viewed as [B, H, N, d] (use all strides)"""
    _cases(impl, ctx, "strided", [(129, 64, False), (129, 64, True)], strided=True)


@check(points=2)
def large_scores(impl, ctx):
    """dK, dV with large scores: q, k scaled by 6, and rows whose scores are all very negative"""
    _cases(impl, ctx, "large", [(129, 64, False), (129, 64, True)], qk_magnitude=6.0)
    _cases(impl, ctx, "negative", [(17, 64, False), (100, 64, True)], negative=True)


@check(points=2)
def custom_scale(impl, ctx):
    """dK, dV with an explicit sm_scale = 0.3"""
    _cases(impl, ctx, "scale", [(100, 32, False), (100, 32, True)], sm_scale=0.3)


@check(points=2, gpu_only=True)
def bf16_inputs(impl, ctx):
    """dK, dV with bfloat16 inputs (GPU only: bf16 tl.dot is broken in the interpreter)"""
    _cases(impl, ctx, "bf16", [(100, 64, False), (1000, 64, False), (1000, 128, True)], dtype=torch.bfloat16)


CHECKS = [aligned, ragged, causal_one_block, causal_many_blocks, head_dims, strided_inputs, large_scores,
          custom_scale, bf16_inputs]
