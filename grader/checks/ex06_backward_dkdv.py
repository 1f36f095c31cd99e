"""Checks for exercise 06: dK and dV of the FlashAttention backward pass (see checks/backward.py
for the cases, the bug simulator and the probe it shares with exercise 07)."""

import torch

from common.compare import CheckFailed, call, constant_factor, expect_tensor, expect_tuple
from grader.checks.backward import (
    BLOCK_GUESSES,
    BackwardCase,
    common_suspects,
    expect_grad,
    is_close,
    last_block_hint,
    nan_advice,
    scale_advice,
    visibility_probe,
)
from grader.core import check

# The exercise: grader/exercises.py finds it from this module's name, ex<folder>.py.
TITLE = "backward dK, dV"
MODULE = "backward_dkdv"
FUNCTIONS = ("attention_backward_dkdv",)

KEYS = 64  # keys per program in tile summaries and maps (exercise 06's interpreter BLOCK_N)


def _dkdv_suspects(case, which):
    out = common_suspects(case, which, "dK")
    N, i, j = case.N, torch.arange(case.N)[:, None], torch.arange(case.N)[None, :]
    dropped = {}
    for b in BLOCK_GUESSES:
        if case.causal and b < 2 * N:
            out[
                f"the diagonal query blocks are not masked (as with BLOCK_N={b}): queries i < j inside the "
                "diagonal blocks must get P = 0"
            ] = case.simulate(see=i >= j // b * b)[which]
            out[
                f"the diagonal query blocks are skipped (as with BLOCK_N={b}): the causal walk starts at the "
                "query block holding row start_n and masks the blocks that cross the diagonal"
            ] = case.simulate(see=(j <= i) & (i >= (j // b + 1) * b))[which]
        if not case.causal and N % b and N - N % b not in dropped:
            dropped[N - N % b] = (
                f"the last query block is skipped when N is not a multiple of BLOCK_M (as with "
                f"BLOCK_M={b}): loop over query blocks up to N itself and mask the rows >= N",
                case.simulate(see=(i < N - N % b).expand(N, N))[which],
            )
    out.update(dropped.values())
    return out


# ----------------------------------------------------------------------------- comparing, with diagnoses
def _diagnose_dkdv(impl, case, name, other_ok, m):
    if torch.isnan(m.out).any():
        return nan_advice(case, name, padded="queries")
    factor = constant_factor(m)
    if factor is not None:
        return scale_advice(case, name, factor)
    hints = []
    if name == "dK" and other_ok:
        hints.append(
            "dV is right, so P (recomputed from lse) and the mask are right: the error is in dS or "
            "the dK product. Check dP^T = V dO^T, dS^T = P^T * (dP^T - delta) with delta broadcast "
            "along the query axis (delta[None, :] in the transposed tile), Q's pointers, and sm_scale"
        )
    if name == "dV" and other_ok:
        hints.append(
            "dK is right, so P must be right: check the dV product (P^T cast to dO's dtype, then "
            "tl.dot with dO), dO's pointers and strides, and the dV store"
        )
    hints.append(last_block_hint(m, case.N, KEYS, "keys", "key", "keys >= N"))
    hints.append(probe_dkdv(impl, case))
    return "\n".join(filter(None, hints)) or None


def probe_dkdv(impl, case):
    """The visibility probe (checks/backward.py) through dV: with dO one-hot over query ranges,
    dV[j, c] counts the visible queries of range c for key j."""

    def run(zeros, onehot, lse):
        return impl.attention_backward_dkdv(zeros, case.k, case.v, onehot, lse, lse.clone(), **case.kwargs)[1]

    return visibility_probe(case, run, per_key=True, rows=KEYS)


# ----------------------------------------------------------------------------- running a case
def _dkdv_case(impl, ctx, N, d, causal, tag, grade=("dV", "dK"), failures=None, B=1, H=1, **options):
    """Check the outputs named in `grade` for one (N, d, causal) case. With `failures` (a dict), record
    each output's first failure there instead of raising. B = H = 1 unless stated: the plain cases and
    the layouts use B = H = 2, which is where a (batch, head) offset shows."""
    case = BackwardCase(ctx, B, H, N, d, causal, tag, **options)
    dk, dv = expect_tuple(
        f"attention_backward_dkdv for {case.what}", call(impl.attention_backward_dkdv, *case.args, **case.kwargs), 2
    )
    expect_tensor(f"dk for {case.what}", dk, case.q.shape, case.dtype)
    expect_tensor(f"dv for {case.what}", dv, case.q.shape, case.dtype)
    dk_ok, dv_ok = is_close(case, dk, 1), is_close(case, dv, 2)
    blocks = (KEYS, case.q.shape[-1])
    for name, out, which, other_ok in (("dV", dv, 2, dk_ok), ("dK", dk, 1, dv_ok)):
        if name not in grade or (failures is not None and failures.get(name)):
            continue
        try:
            expect_grad(
                case,
                name,
                out,
                which,
                blocks,
                lambda which=which: _dkdv_suspects(case, which),
                lambda m, name=name, other_ok=other_ok: _diagnose_dkdv(impl, case, name, other_ok, m),
            )
        except CheckFailed as exc:
            if failures is None:
                raise
            failures[name] = exc


def _cases(impl, ctx, tag, cases, grade=("dV", "dK"), failures=None, **options):
    for i, (N, d, causal) in enumerate(cases):
        _dkdv_case(impl, ctx, N, d, causal, f"{tag}{i}", grade, failures, **options)


BH = {"B": 2, "H": 2}


# ----------------------------------------------------------------------------- credit per concept
# dv and dk grade one output each on plain non-causal inputs. The other checks grade one idea each
# (causal structure, the ragged tail, layouts and head dims, the scale argument) on the outputs
# whose own check passes: a slip in dS costs the dk check, not every check.
def _core(impl, ctx):
    """{"dV": failure or None, "dK": failure or None} on the plain cases (computed once per run)."""
    cache = ctx.__dict__.setdefault("_dkdv_core", {})
    if not cache:
        failures = {"dV": None, "dK": None}
        N = 512 if ctx.gpu else 128
        _cases(impl, ctx, "core", [(N, 64, False)], failures=failures, **BH)
        _cases(impl, ctx, "large", [(N, 64, False)], failures=failures, qk_magnitude=6.0)
        cache.update(failures)
    return cache


def _feature(impl, ctx, tag, cases, **options):
    core = _core(impl, ctx)
    graded = tuple(name for name in ("dV", "dK") if core[name] is None)
    if not graded:
        raise CheckFailed(
            "fix dv and dk first: both are wrong on the plain non-causal case, so this check "
            f"cannot be graded apart from them.\n{core['dV']}"
        )
    _cases(impl, ctx, tag, cases, grade=graded, **options)
    if len(graded) < 2:
        missing = ({"dV", "dK"} - set(graded)).pop()
        return (
            f"graded on {graded[0]} only: {missing} is wrong on the plain case, which check "
            f"{missing.lower()} grades; once it passes, this check grades {missing} too"
        )
    return None


# ----------------------------------------------------------------------------- checks
@check(points=5)
def dv(impl, ctx):
    """dV = P^T dO, non-causal, several query and key blocks, scores small and large"""
    if _core(impl, ctx)["dV"] is not None:
        raise _core(impl, ctx)["dV"]


@check(points=5)
def dk(impl, ctx):
    """dK = sm_scale * dS^T Q with dS = P * (dP - delta), non-causal, several blocks, scores small and large"""
    if _core(impl, ctx)["dK"] is not None:
        raise _core(impl, ctx)["dK"]


def _ragged(impl, ctx):
    cache = ctx.__dict__.setdefault("_dkdv_ragged", {})
    if "failure" not in cache:
        try:
            sizes = (1, 17, 100, 129) + ((1000,) if ctx.gpu else ())
            note = _feature(impl, ctx, "ragged", [(N, 64, False) for N in sizes])
            cache["note"] = _feature(impl, ctx, "negative", [(17, 64, False), (100, 64, False)], negative=True) or note
            cache["failure"] = None
        except CheckFailed as exc:
            cache["failure"] = exc
    return cache


@check(points=4)
def ragged(impl, ctx):
    """dK, dV, non-causal, N = 1, 17, 100, 129: the last partial query block; very negative scores"""
    if _ragged(impl, ctx)["failure"] is not None:
        raise _ragged(impl, ctx)["failure"]
    return _ragged(impl, ctx)["note"]


@check(points=2)
def causal_one_block(impl, ctx):
    """dK, dV, causal, N = 1, 17, 64 (one key block: only the diagonal)"""
    return _feature(impl, ctx, "causal1_", [(N, 64, True) for N in (1, 17, 64)])


@check(points=4)
def causal_many_blocks(impl, ctx):
    """dK, dV, causal, N = 128, 192, and 100, 129 once ragged passes: query blocks skipped, diagonal, below it"""
    note = _feature(impl, ctx, "causal", [(N, 64, True) for N in (128, 192)])
    if _ragged(impl, ctx)["failure"] is not None:  # the ragged tail is graded by its own check
        return (
            "graded on N = 128 and 192 only: the ragged check fails, so the causal cases with a partial last "
            "block (N = 100, 129) wait until it passes"
        )
    sizes = (100, 129) + ((1000,) if ctx.gpu else ())
    return _feature(impl, ctx, "causal_ragged", [(N, 64, True) for N in sizes]) or note


@check(points=2)
def strides_and_head_dims(impl, ctx):
    """dK, dV with q, k, v, dO each in its own memory layout (use all strides), and d = 16, 32, 128"""
    note = _feature(impl, ctx, "strided", [(128, 64, False)], strided=True, **BH)
    return _feature(impl, ctx, "dims", [(64, d, False) for d in (16, 32, 128)]) or note


@check(points=1)
def custom_scale(impl, ctx):
    """dK, dV with an explicit sm_scale = 0.3"""
    return _feature(impl, ctx, "scale", [(64, 32, False)], sm_scale=0.3)


@check(points=2, gpu_only=True)
def bf16_inputs(impl, ctx):
    """dK, dV with bfloat16 inputs (GPU only: bf16 tl.dot is broken in the interpreter)"""
    _cases(impl, ctx, "bf16", [(100, 64, False), (1000, 64, False), (1000, 128, True)], dtype=torch.bfloat16)


CHECKS = [dv, dk, ragged, causal_one_block, causal_many_blocks, strides_and_head_dims, custom_scale, bf16_inputs]
