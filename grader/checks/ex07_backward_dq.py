"""Checks for exercise 07: dQ of the FlashAttention backward pass, and the assembled autograd function.

The dQ checks feed reference lse and delta, so they grade this kernel alone. The flash_attention
checks run the student's exercises 04-07 together; when they fail, each earlier exercise is graded
on one small case to name the one to fix.
"""

import math

import torch

from common import inputs, reference
from common.compare import CheckFailed, call, constant_factor, expect_close, expect_tensor, rows_wrong, span
from common.tolerance import FLOOR, allowed_error
from grader.checks.backward import (BLOCK_GUESSES, BackwardCase, classify_map, common_suspects, expect_grad,
                                    nan_advice, probe_width, scale_advice, visibility_map)
from grader.core import NOT_IMPLEMENTED, check
from grader.sandbox import ProcessEnded, StudentCodeFailed, raised

QUERIES = 64  # query rows per program in tile summaries and maps (exercise 07's interpreter BLOCK_M)
OWN_STUBS = (f"{NOT_IMPLEMENTED}: forward", f"{NOT_IMPLEMENTED}: backward")  # this file's autograd regions


# ----------------------------------------------------------------------------- dQ: suspects and diagnoses
def _dq_suspects(case):
    out = common_suspects(case, 0, "dQ")
    N, i, j = case.N, torch.arange(case.N)[:, None], torch.arange(case.N)[None, :]
    dropped = {}
    for b in BLOCK_GUESSES:
        if case.causal and b < 2 * N:
            out[f"the diagonal key blocks are not masked (as with BLOCK_M={b}): keys j > i inside the diagonal "
                "block must get P = 0"] = case.simulate(see=j < (i // b + 1) * b)[0]
            out[f"the diagonal key blocks are skipped (as with BLOCK_M={b}): after the unmasked blocks left of the "
                "diagonal, visit [start_m, start_m + BLOCK_M) with the causal mask"] = case.simulate(
                see=(j <= i) & (j < i // b * b))[0]
            out[f"only the diagonal key block is visited (as with BLOCK_M={b}): every key block left of the "
                "diagonal must be visited too, unmasked"] = case.simulate(see=(j <= i) & (j >= i // b * b))[0]
        if not case.causal and N % b and N - N % b not in dropped:
            dropped[N - N % b] = (f"the last key block is skipped when N is not a multiple of BLOCK_N (as with "
                                  f"BLOCK_N={b}): visit the ragged remainder [N // BLOCK_N * BLOCK_N, N) too, with "
                                  "the keys >= N masked", case.simulate(see=(j < N - N % b).expand(N, N))[0])
    out.update(dropped.values())
    return out


def _diagnose_dq(impl, case, m):
    if torch.isnan(m.out).any():
        return nan_advice(case, "dQ")
    factor = constant_factor(m)
    if factor is not None:
        return scale_advice(case, "dQ", factor)
    hints = []
    bad_rows = rows_wrong(m, -2)
    last = (case.N - 1) // QUERIES * QUERIES
    if last > 0 and not bad_rows[:last].any():
        hints.append(f"only the rows of the last query block are wrong (rows {span(bad_rows)}): check the masks "
                     "that involve N there (rows >= N, keys >= N, the store)")
    probe = _probe_dq(impl, case)
    if probe:
        hints.append(probe)
    return "\n".join(hints) or None


def _probe_dq(impl, case):
    """Run the student's kernel with q = 0, lse = 0, v = 0, delta = -1 and K one-hot over key ranges.

    Then P = 1 wherever the kernel lets a key through, dS = P * (0 - (-1)) = P, and with sm_scale = 1
    dQ[i, c] counts the visible keys of range c for query i.
    """
    B, H, N, d = case.q.shape
    width = probe_width(N, d)
    ranges = -(-N // width)
    zeros = torch.zeros(B, H, N, d, dtype=case.dtype, device=case.q.device)
    onehot = zeros.clone()
    onehot[..., torch.arange(N), torch.arange(N) // width] = 1
    lse = torch.zeros(B, H, N, dtype=torch.float32, device=case.q.device)
    try:
        dq = impl.attention_backward_dq(zeros, onehot, zeros, case.do, lse, lse - 1.0, causal=case.causal, sm_scale=1.0)
    except Exception:  # noqa: BLE001 - the probe is advice only; the check has already failed
        return None
    got = dq.double().cpu()[..., :ranges]
    expected = (case.visible().double() @ onehot[0, 0].double().cpu()[:, :ranges]).expand_as(got)
    if (got - expected).abs().max() <= 0.5:
        return ("the (query, key) pairs your kernel visits and masks are right (probed with q = 0): the error is "
                "in the values, not in the loop bounds or masks")
    return (classify_map(case, got, expected, width, "keys") + "\n"
            + visibility_map(got, expected, QUERIES, width, "query", "key", "queries"))


# ----------------------------------------------------------------------------- dQ cases
def _dq_case(impl, ctx, N, d, causal, tag, **options):
    case = BackwardCase(ctx, 2, 3, N, d, causal, tag, **options)
    dq = call(impl.attention_backward_dq, *case.args, **case.kwargs)
    expect_tensor(f"dq for {case.what}", dq, case.q.shape, case.dtype)
    expect_grad(case, "dQ", dq, 0, (QUERIES, d), lambda: _dq_suspects(case), lambda m: _diagnose_dq(impl, case, m))


def _cases(impl, ctx, tag, cases, **options):
    """Check dQ for each (N, d, causal) of `cases`, with B=2, H=3."""
    for i, (N, d, causal) in enumerate(cases):
        _dq_case(impl, ctx, N, d, causal, f"{tag}{i}", **options)


# ----------------------------------------------------------------------------- the assembled function
def _exercise(impl, folder, module):
    return impl.exercise(folder, module)


def _fails(what, fn):
    """None when fn() runs and passes, else a one-line reason."""
    try:
        return fn()
    except StudentCodeFailed as exc:
        if NOT_IMPLEMENTED in exc.info["text"]:
            return "is not implemented yet"
        if exc.info["type"] == "ImportFailed":
            return f"cannot be imported: {exc.info['text'].splitlines()[0]}"
        text = exc.info["text"].strip().splitlines()
        return f"raised {text[0] if text else exc.info['type']}"
    except (CheckFailed, ProcessEnded) as exc:
        return f"failed: {str(exc).splitlines()[0]}"


def _wrong(out, ref, lowp, dtype):
    ref = ref.detach().double().cpu()
    err = (out.detach().double().cpu() - ref).abs().nan_to_num(nan=math.inf)
    return bool((err > allowed_error(ref, lowp.detach().cpu(), dtype)).any())


def _culprit(impl, ctx, causal, dtype, strided=False):
    """Grade exercises 04, 05, 06 and this dQ kernel on one small case each (the inputs laid out as
    in the failing case); name the first that fails."""
    case = BackwardCase(ctx, 1, 2, 100, 32, causal, "culprit", dtype=dtype, strided=strided)
    q, k, v, do = case.q, case.k, case.v, case.do
    o_ref, lse_ref = reference.attention(q, k, v, causal)
    o_low, lse_low = reference.attention_lowp(q, k, v, causal)
    where = f"(B=1 H=2 N=100 d=32, {'causal' if causal else 'non-causal'}, {str(dtype)[6:]}{', strided views' if strided else ''})"

    def forward():
        o, lse = _exercise(impl, "04_flash_forward", "flash_forward").flash_attention_forward(q, k, v, causal=causal)
        if _wrong(o, o_ref, o_low, dtype) or _wrong(lse, lse_ref, lse_low, torch.float32):
            return "computes a wrong o or lse"

    def preprocess():
        o = o_ref.to(dtype)
        delta = _exercise(impl, "05_backward_preprocess", "backward_preprocess").attention_backward_preprocess(o, do)
        if _wrong(delta, reference.attention_delta(o, do), reference.attention_delta_lowp(o, do), dtype):
            return "computes a wrong delta"

    def dkdv():
        dk, dv = _exercise(impl, "06_backward_dkdv", "backward_dkdv").attention_backward_dkdv(*case.args, causal=causal)
        if _wrong(dk, case.ref[1], case.lowp[1], dtype) or _wrong(dv, case.ref[2], case.lowp[2], dtype):
            return "computes a wrong dK or dV"

    def dq():
        if _wrong(impl.attention_backward_dq(*case.args, causal=causal), case.ref[0], case.lowp[0], dtype):
            return "computes a wrong dQ"

    for name, grade, number in (("exercise 04 (forward)", forward, "04"), ("exercise 05 (delta)", preprocess, "05"),
                                ("exercise 06 (dK, dV)", dkdv, "06"), ("dQ kernel of exercise 07", dq, "07")):
        reason = _fails(name, grade)
        if reason:
            return (f"The cause is a piece it uses: your {name} {reason} when graded alone {where}. "
                    f"flash_attention uses it: fix it first (make grade EX={number}).")
    return None


_GLUE = ("Your exercises 04-07 each pass on their own on a small case, so look at the assembly: forward must save "
         "q, k, v, o and lse; backward must pass causal and sm_scale on and return (dq, dk, dv, None, None) in "
         "that order.")


def _with_culprit(impl, ctx, causal, dtype, message, strided=False):
    culprit = _culprit(impl, ctx, causal, dtype, strided)
    return CheckFailed(f"{message}\n{culprit or _GLUE}")


def _run_assembled(impl, q, k, v, do, causal):
    """(o, dq, dk, dv) from the student's flash_attention, forward then backward."""
    return impl.flash_attention.with_backward((q, k, v), do, causal=causal)


def _assembled_case(impl, ctx, N, d, causal, tag, strided=False):
    dtype = torch.float16
    q, k, v, do = (ctx.randn((2, 3, N, d), dtype, f"{tag}.{n}") for n in ("q", "k", "v", "do"))
    if strided:
        q, k, v, do = (inputs.strided_view(t) for t in (q, k, v, do))
    what = f"flash_attention B=2 H=3 N={N} d={d} ({'causal' if causal else 'non-causal'}{', strided views' if strided else ''})"
    try:
        o, dq, dk, dv = _run_assembled(impl, q, k, v, do, causal)
    except Exception as exc:  # noqa: BLE001 - name the earlier exercise that breaks it, if any
        if any(stub in str(exc) for stub in OWN_STUBS):
            raise
        culprit = _culprit(impl, ctx, causal, dtype, strided)
        if culprit is None:
            raise
        raise CheckFailed(f"{what}: raised {raised(exc)}\n{culprit}") from None
    for name, t in (("o", o), ("q.grad", dq), ("k.grad", dk), ("v.grad", dv)):
        expect_tensor(f"{what}: {name}", t, q.shape, dtype)
    o_ref, _ = reference.attention(q, k, v, causal)
    o_low, _ = reference.attention_lowp(q, k, v, causal)
    refs = reference.attention_grads(q, k, v, do, causal)
    lows = reference.attention_grads_lowp(q, k, v, do, causal)
    checks = [("o", o, o_ref, o_low)] + [(n, g, r, lw) for n, g, r, lw in zip(("q.grad", "k.grad", "v.grad"),
                                                                                (dq, dk, dv), refs, lows)]
    for name, out, ref, low in checks:
        try:
            expect_close(f"{what}: {name}", out, ref, low, dtype, blocks=(QUERIES, d))
        except CheckFailed as exc:
            raise _with_culprit(impl, ctx, causal, dtype, str(exc), strided) from None


def _directional_check(impl, ctx, B, H, N, d, causal, tag, dtype):
    """Compare the student's gradient along random directions with central differences of the reference."""
    q, k, v, do = (ctx.randn((B, H, N, d), dtype, f"{tag}.{n}") for n in ("q", "k", "v", "do"))
    what = f"flash_attention B={B} H={H} N={N} d={d} ({'causal' if causal else 'non-causal'}, {str(dtype)[6:]})"
    try:
        _, *grads = _run_assembled(impl, q, k, v, do, causal)
    except Exception as exc:  # noqa: BLE001 - name the earlier exercise that breaks it, if any
        if any(stub in str(exc) for stub in OWN_STUBS):
            raise
        culprit = _culprit(impl, ctx, causal, dtype)
        if culprit is None:
            raise
        raise CheckFailed(f"{what}: raised {raised(exc)}\n{culprit}") from None
    x = [t.double() for t in (q, k, v)]
    do64 = do.double()
    lows = reference.attention_grads_lowp(q, k, v, do, causal)

    def loss(xs):
        return float((reference.attention(*xs, causal)[0] * do64).sum())

    eps = 1e-4  # float64: the central difference is exact to ~1e-8 here
    for t in range(3):
        us = [ctx.randn(tuple(x[0].shape), torch.float64, f"{tag}.u{t}.{n}") for n in "qkv"]
        fd = (loss([a + eps * u for a, u in zip(x, us)]) - loss([a - eps * u for a, u in zip(x, us)])) / (2 * eps)
        analytic = sum(float((g.double() * u).sum()) for g, u in zip(grads, us))
        plain = sum(float((g.double() * u).sum()) for g, u in zip(lows, us))
        size = sum(float((g.double().abs() * u.abs()).sum()) for g, u in zip(lows, us))
        tolerance = 2 * abs(plain - fd) + FLOOR[dtype] * max(1.0, size)
        if not abs(analytic - fd) <= tolerance:
            raise _with_culprit(impl, ctx, causal, dtype, (
                f"{what}: along a random direction u, your gradient gives dL/du = {analytic:.6g} but central finite "
                f"differences of attention give {fd:.6g} (allowed error {tolerance:.3g}): the backward does not "
                "compute the derivative of the forward"))


# ----------------------------------------------------------------------------- checks
@check(points=3)
def aligned(impl, ctx):
    """dQ, non-causal, N a multiple of the blocks (several query and key blocks)"""
    _cases(impl, ctx, "aligned", [(512 if ctx.gpu else 128, 64, False)])


@check(points=3)
def ragged(impl, ctx):
    """dQ, non-causal, N = 1, 17, 100, 129 and a larger N (padded queries and keys)"""
    sizes = (1, 17, 100, 129) + ((1000,) if ctx.gpu else (200,))
    _cases(impl, ctx, "ragged", [(N, 64, False) for N in sizes])


@check(points=4)
def causal(impl, ctx):
    """dQ, causal, N = 1, 17, 64, 100, 129, 256 (key blocks left of the diagonal, the diagonal, ragged)"""
    sizes = (1, 17, 64, 100, 129, 256) + ((1000,) if ctx.gpu else ())
    _cases(impl, ctx, "causal", [(N, 64, True) for N in sizes])


@check(points=2)
def head_dims(impl, ctx):
    """dQ, head dims d = 16, 32, 128, causal and not"""
    _cases(impl, ctx, "dims", [(100, d, causal) for d in (16, 32, 128) for causal in (False, True)])


@check(points=2)
def strided_inputs(impl, ctx):
    """dQ, q/k/v/dO stored as [B, N, H, d] and viewed as [B, H, N, d] (use all strides)"""
    _cases(impl, ctx, "strided", [(129, 64, False), (129, 64, True)], strided=True)


@check(points=3)
def large_scores(impl, ctx):
    """dQ with large scores: q, k scaled by 6, and rows whose scores are all very negative (padded keys)"""
    _cases(impl, ctx, "large", [(129, 64, False), (129, 64, True)], qk_magnitude=6.0)
    _cases(impl, ctx, "negative", [(1, 64, False), (17, 64, False), (100, 32, False), (100, 32, True)], negative=True)


@check(points=1)
def custom_scale(impl, ctx):
    """dQ with an explicit sm_scale = 0.3"""
    _cases(impl, ctx, "scale", [(100, 32, False), (100, 32, True)], sm_scale=0.3)


@check(points=1, gpu_only=True)
def bf16_inputs(impl, ctx):
    """dQ with bfloat16 inputs (GPU only: bf16 tl.dot is broken in the interpreter)"""
    _cases(impl, ctx, "bf16", [(100, 64, False), (1000, 64, False), (1000, 128, True)], dtype=torch.bfloat16)


@check(points=1, gpu_only=True)
def deterministic(impl, ctx):
    """dQ is identical over two runs on the same inputs (no race between programs; GPU only)"""
    for causal in (False, True):
        case = BackwardCase(ctx, 4, 8, 2048, 64, causal, f"race{int(causal)}", grads=False)
        first = impl.attention_backward_dq(*case.args, **case.kwargs)
        for _ in range(3):
            again = impl.attention_backward_dq(*case.args, **case.kwargs)
            if not torch.equal(first, again):
                diff = (first.float() - again.float()).abs().nan_to_num(nan=math.inf).max().item()
                raise CheckFailed(
                    f"dq for {case.what} differs between two runs on the same inputs (by up to {diff:.3g}): a race. "
                    "Several programs add into the same dQ rows (atomic adds, or a read-modify-write of dq in "
                    "memory), and their order changes from run to run. Give each query block to one program, "
                    "accumulate in registers and store once.")


@check(points=3)
def autograd_gradients(impl, ctx):
    """flash_attention: o and the gradients of q, k, v through your exercises 04-07 (torch.autograd)"""
    _assembled_case(impl, ctx, 129, 64, False, "auto0")
    _assembled_case(impl, ctx, 100, 32, True, "auto1", strided=True)


@check(points=2)
def finite_differences(impl, ctx):
    """flash_attention's gradient matches central finite differences of attention along random directions"""
    # fp32 in the interpreter; on a GPU tl.dot rounds fp32 to TF32, so the GPU case runs in fp16.
    dtype, shape = (torch.float16, (2, 4, 300, 64)) if ctx.gpu else (torch.float32, (1, 2, 37, 16))
    for causal in (False, True):
        _directional_check(impl, ctx, *shape, causal, f"fd{int(causal)}", dtype)


CHECKS = [aligned, ragged, causal, head_dims, strided_inputs, large_scores, custom_scale, bf16_inputs, deterministic,
          autograd_gradients, finite_differences]
