"""Checks for exercise 07: dQ of the FlashAttention backward pass, and the assembled autograd function.

The dQ checks feed reference lse and delta, so they grade this kernel alone. The flash_attention
checks run the student's exercises 04-07 together; when they fail, each earlier exercise is graded
on one small case to name the one to fix.
"""

import math

import torch

from common import reference
from common.compare import (
    CheckFailed,
    call,
    constant_factor,
    expect_tensor,
    slices_advice,
)
from common.tolerance import FLOOR, allowed_error
from grader.checks import layouts
from grader.checks.backward import (
    BLOCK_GUESSES,
    BackwardCase,
    common_suspects,
    expect_grad,
    last_block_hint,
    nan_advice,
    scale_advice,
    visibility_probe,
)
from grader.core import NOT_IMPLEMENTED, check
from grader.sandbox import ProcessEnded, StudentCodeFailed, raised

# The exercise: grader/exercises.py finds it from this module's name, ex<folder>.py.
TITLE = "backward dQ and autograd"
MODULE = "backward_dq"
FUNCTIONS = ("attention_backward_dq", "flash_attention")

QUERIES = 64  # query rows per program in tile summaries and maps (exercise 07's interpreter BLOCK_M)
OWN_STUBS = (f"{NOT_IMPLEMENTED}: forward", f"{NOT_IMPLEMENTED}: backward")  # this file's autograd regions


# ----------------------------------------------------------------------------- dQ: suspects and diagnoses
def _dq_suspects(case):
    out = common_suspects(case, 0, "dQ")
    N, i, j = case.N, torch.arange(case.N)[:, None], torch.arange(case.N)[None, :]
    dropped = {}
    for b in BLOCK_GUESSES:
        if case.causal and b < 2 * N:
            out[
                f"the diagonal key blocks are not masked (as with BLOCK_M={b}): keys j > i inside the diagonal "
                "block must get P = 0"
            ] = case.simulate(see=j < (i // b + 1) * b)[0]
            out[
                f"the diagonal key blocks are skipped (as with BLOCK_M={b}): after the unmasked blocks left of the "
                "diagonal, visit [start_m, start_m + BLOCK_M) with the causal mask"
            ] = case.simulate(see=(j <= i) & (j < i // b * b))[0]
            out[
                f"only the diagonal key block is visited (as with BLOCK_M={b}): every key block left of the "
                "diagonal must be visited too, unmasked"
            ] = case.simulate(see=(j <= i) & (j >= i // b * b))[0]
        if not case.causal and N % b and N - N % b not in dropped:
            dropped[N - N % b] = (
                f"the last key block is skipped when N is not a multiple of BLOCK_N (as with "
                f"BLOCK_N={b}): visit the ragged remainder [N // BLOCK_N * BLOCK_N, N) too, with "
                "the keys >= N masked",
                case.simulate(see=(j < N - N % b).expand(N, N))[0],
            )
    out.update(dropped.values())
    return out


def _diagnose_dq(impl, case, m):
    if torch.isnan(m.out).any():
        return nan_advice(case, "dQ")
    factor = constant_factor(m)
    if factor is not None:
        return scale_advice(case, "dQ", factor)
    hints = [last_block_hint(m, case.N, QUERIES, "rows", "query", "rows >= N, keys >= N"), _probe_dq(impl, case)]
    return "\n".join(filter(None, hints)) or None


def _probe_dq(impl, case):
    """The visibility probe (checks/backward.py) through dQ: with v = 0, delta = -1 and sm_scale = 1,
    dS = P, and with K one-hot over key ranges dQ[i, c] counts the visible keys of range c for query i."""

    def run(zeros, onehot, lse):
        return impl.attention_backward_dq(
            zeros, onehot, zeros, case.do, lse, lse - 1.0, causal=case.causal, sm_scale=1.0
        )

    return visibility_probe(case, run, per_key=False, rows=QUERIES)


# ----------------------------------------------------------------------------- dQ cases
def _dq_case(impl, ctx, N, d, causal, tag, B=1, H=1, **options):
    case = BackwardCase(ctx, B, H, N, d, causal, tag, **options)
    dq = call(impl.attention_backward_dq, *case.args, **case.kwargs)
    expect_tensor(f"dq for {case.what}", dq, case.q.shape, case.dtype)
    expect_grad(case, "dQ", dq, 0, (QUERIES, d), lambda: _dq_suspects(case), lambda m: _diagnose_dq(impl, case, m))


def _cases(impl, ctx, tag, cases, **options):
    """Check dQ for each (N, d, causal) of `cases`; B = H = 1 unless given (the plain cases and the
    layouts use B = H = 2, where a (batch, head) offset shows)."""
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
    """'' when out is within the tolerance of the exercises themselves, else why it is not (at least ' ')."""
    ref = ref.detach().double().cpu()
    err = (out.detach().double().cpu() - ref).abs().nan_to_num(nan=math.inf)
    wrong = err > allowed_error(ref, lowp.detach().cpu(), dtype)
    if not wrong.any():
        return ""
    advice = slices_advice(wrong, out.detach().double().cpu())
    return f" ({advice})" if advice else " "


def _culprit(impl, ctx, causal, dtype, strided=False):
    """Grade exercises 04, 05, 06 and this dQ kernel on one small case each (the inputs laid out as
    in the failing case); name the first that fails."""
    case = BackwardCase(ctx, 2, 2, 100, 32, causal, "culprit", dtype=dtype, strided=strided)
    q, k, v, do = case.q, case.k, case.v, case.do
    o_ref, lse_ref = reference.attention(q, k, v, causal)
    o_low, lse_low = reference.attention_lowp(q, k, v, causal)
    where = f"(B=2 H=2 N=100 d=32, {'causal' if causal else 'non-causal'}, {str(dtype)[6:]}{', strided views' if strided else ''})"

    def forward():
        o, lse = _exercise(impl, "04_flash_forward", "flash_forward").flash_attention_forward(q, k, v, causal=causal)
        why = _wrong(o, o_ref, o_low, dtype) or _wrong(lse, lse_ref, lse_low, torch.float32)
        if why:
            return "computes a wrong o or lse" + why.rstrip()

    def preprocess():
        o = o_ref.to(dtype)
        delta = _exercise(impl, "05_backward_preprocess", "backward_preprocess").attention_backward_preprocess(o, do)
        why = _wrong(delta, reference.attention_delta(o, do), reference.attention_delta_lowp(o, do), dtype)
        if why:
            return "computes a wrong delta" + why.rstrip()

    def dkdv():
        dk, dv = _exercise(impl, "06_backward_dkdv", "backward_dkdv").attention_backward_dkdv(*case.args, causal=causal)
        why = _wrong(dk, case.ref[1], case.lowp[1], dtype) or _wrong(dv, case.ref[2], case.lowp[2], dtype)
        if why:
            return "computes a wrong dK or dV" + why.rstrip()

    def dq():
        out = impl.attention_backward_dq(*case.args, causal=causal)
        try:
            expect_grad(
                case,
                "dQ",
                out,
                0,
                (QUERIES, case.q.shape[-1]),
                lambda: _dq_suspects(case),
                lambda m: _diagnose_dq(impl, case, m),
            )
        except CheckFailed as exc:
            cause = next((line for line in str(exc).splitlines() if line.startswith("Likely cause: ")), "")
            return "computes a wrong dQ" + (f" ({cause[len('Likely cause: ') :]})" if cause else "")

    for name, grade, number in (
        ("exercise 04 (forward)", forward, "04"),
        ("exercise 05 (delta)", preprocess, "05"),
        ("exercise 06 (dK, dV)", dkdv, "06"),
        ("dQ kernel of exercise 07", dq, "07"),
    ):
        reason = _fails(name, grade)
        if reason:
            return (
                f"The cause is a piece it uses: your {name} {reason} when graded alone {where}. "
                f"flash_attention uses it: fix it first (make grade EX={number})."
            )
    return None


_GLUE = (
    "Your exercises 04-07 each pass on their own on a small case, so look at the assembly (the assembly check "
    "compares it with your kernels): forward must save q, k, v, o and lse; backward must pass causal on from "
    "forward (ctx.causal) and sm_scale to every kernel, and return the gradients in the order of forward's "
    "inputs, (dq, dk, dv, None, None)."
)


def _with_culprit(impl, ctx, causal, dtype, message, strided=False):
    culprit = _culprit(impl, ctx, causal, dtype, strided)
    return CheckFailed(f"{message}\n{culprit or _GLUE}")


def _run_assembled(impl, q, k, v, do, causal):
    """(o, dq, dk, dv) from the student's flash_attention, forward then backward."""
    return impl.flash_attention.with_backward((q, k, v), do, causal=causal)


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
            raise _with_culprit(
                impl,
                ctx,
                causal,
                dtype,
                (
                    f"{what}: along a random direction u, your gradient gives dL/du = {analytic:.6g} but central finite "
                    f"differences of attention give {fd:.6g} (allowed error {tolerance:.3g}): the backward does not "
                    "compute the derivative of the forward"
                ),
            )


# ----------------------------------------------------------------------------- assembly
def _assembly_case(impl, ctx, N, d, causal, tag):
    """flash_attention's (o, dq, dk, dv) against the student's own kernels called one by one on the
    same inputs (q, k, v, dO each in its own layout): the assembly is graded apart from the kernels."""
    dtype = torch.float16
    q, k, v, do = layouts.mixed(*(ctx.randn((1, 2, N, d), dtype, f"{tag}.{n}") for n in ("q", "k", "v", "do")))
    what = f"flash_attention B=1 H=2 N={N} d={d} ({'causal' if causal else 'non-causal'}, mixed layouts)"
    o, dq, dk, dv = _run_assembled(impl, q, k, v, do, causal)
    for name, t in (("o", o), ("q.grad", dq), ("k.grad", dk), ("v.grad", dv)):
        expect_tensor(f"{what}: {name}", t, q.shape, dtype)

    def pieces(flag):
        o2, lse = _exercise(impl, "04_flash_forward", "flash_forward").flash_attention_forward(q, k, v, causal=flag)
        delta = _exercise(impl, "05_backward_preprocess", "backward_preprocess").attention_backward_preprocess(o2, do)
        dk2, dv2 = _exercise(impl, "06_backward_dkdv", "backward_dkdv").attention_backward_dkdv(
            q, k, v, do, lse, delta, causal=flag
        )
        dq2 = impl.attention_backward_dq(q, k, v, do, lse, delta, causal=flag)
        return {"o": o2, "q.grad": dq2, "k.grad": dk2, "v.grad": dv2}

    own = pieces(causal)

    def flipped(flag):
        """The backward kernels with `flag` for causal, on the right lse and delta."""
        o2, lse = _exercise(impl, "04_flash_forward", "flash_forward").flash_attention_forward(q, k, v, causal=causal)
        delta = _exercise(impl, "05_backward_preprocess", "backward_preprocess").attention_backward_preprocess(o2, do)
        dk2, dv2 = _exercise(impl, "06_backward_dkdv", "backward_dkdv").attention_backward_dkdv(
            q, k, v, do, lse, delta, causal=flag
        )
        return {
            "q.grad": impl.attention_backward_dq(q, k, v, do, lse, delta, causal=flag),
            "k.grad": dk2,
            "v.grad": dv2,
        }

    refs = dict(zip(("q.grad", "k.grad", "v.grad"), reference.attention_grads(q, k, v, do, causal)))
    lows = dict(zip(("q.grad", "k.grad", "v.grad"), reference.attention_grads_lowp(q, k, v, do, causal)))
    refs["o"], lows["o"] = reference.attention(q, k, v, causal)[0], reference.attention_lowp(q, k, v, causal)[0]
    got = {"o": o, "q.grad": dq, "k.grad": dk, "v.grad": dv}

    def same(a, b, name):
        tol = allowed_error(refs[name].cpu(), lows[name].cpu(), dtype)
        return bool(((a.double().cpu() - b.double().cpu()).abs().nan_to_num(nan=math.inf) <= tol).all())

    wrong = [name for name in got if not same(got[name], own[name], name)]
    if not wrong:
        return
    name = wrong[0]
    lines = [
        f"{what}: {', '.join(wrong)} differ from what your own kernels (exercises 04-07, called one by one "
        "on the same inputs) give, so the autograd function does not assemble them correctly."
    ]
    swapped = [(a, b) for a in wrong for b in own if b != a and same(got[a], own[b], a)]
    if swapped:
        a, b = swapped[0]
        lines.append(
            f"Likely cause: {a} is what your kernels give for {b}: backward must return the gradients in "
            "the order of forward's inputs, (dq, dk, dv, None, None)."
        )
    elif not {"o"} & set(wrong) and all(same(got[n], flip, n) for n, flip in flipped(not causal).items() if n in wrong):
        lines.append(
            f"Likely cause: {', '.join(wrong)} are what your backward kernels give with causal={not causal}: "
            "pass causal on from forward (ctx.causal) to every kernel of backward."
        )
    else:
        lines.append(
            "Likely cause: the values forward saves or backward passes on: save q, k, v, o and lse in "
            "forward, compute delta from o and dO, and pass causal on from forward (ctx.causal) and "
            "sm_scale to every kernel."
        )
    raise CheckFailed("\n".join(lines))


# ----------------------------------------------------------------------------- checks
# dq grades the kernel's core; ragged, causal, strides_and_head_dims and custom_scale grade one idea
# each on dQ (after dq passes: they say so otherwise); assembly grades the autograd function against
# the student's own kernels, whatever their errors; autograd grades the whole against the math.
def _core(impl, ctx):
    cache = ctx.__dict__.setdefault("_dq_core", {})
    if not cache:
        try:
            N = 512 if ctx.gpu else 128
            _cases(impl, ctx, "core", [(N, 64, False)], B=2, H=2)
            _cases(impl, ctx, "large", [(N, 64, False)], qk_magnitude=6.0)
            cache["failure"] = None
        except CheckFailed as exc:
            cache["failure"] = exc
    return cache["failure"]


def _feature(impl, ctx, tag, cases, **options):
    try:
        _cases(impl, ctx, tag, cases, **options)
    except CheckFailed as exc:
        core = _core(impl, ctx)
        if core is None:
            raise
        raise CheckFailed(
            "fix dq first: dQ is wrong on the plain non-causal case too, so this check cannot be "
            f"graded apart from it.\n{exc}"
        ) from None


@check(points=6)
def dq(impl, ctx):
    """dQ = sm_scale * dS K with dS = P * (dP - delta), non-causal, several blocks, scores small and large"""
    failure = _core(impl, ctx)
    if failure is not None:
        raise failure


@check(points=4)
def ragged(impl, ctx):
    """dQ, non-causal, N = 1, 17, 100, 129 (padded queries and keys), and rows whose scores are all very negative"""
    sizes = (1, 17, 100, 129) + ((1000,) if ctx.gpu else ())
    _feature(impl, ctx, "ragged", [(N, 64, False) for N in sizes])
    _feature(impl, ctx, "negative", [(1, 64, False), (17, 64, False), (100, 32, False)], negative=True)


@check(points=4)
def causal(impl, ctx):
    """dQ, causal, N = 1, 17, 64, 100, 129, 192 (key blocks left of the diagonal, the diagonal, ragged)"""
    sizes = (1, 17, 64, 100, 129, 192) + ((1000,) if ctx.gpu else ())
    _feature(impl, ctx, "causal", [(N, 64, True) for N in sizes])


@check(points=2)
def strides_and_head_dims(impl, ctx):
    """dQ with q, k, v, dO each in its own memory layout (use all strides), and d = 16, 32, 128"""
    _feature(impl, ctx, "strided", [(128, 64, False)], strided=True, B=2, H=2)
    _feature(impl, ctx, "dims", [(64, d, False) for d in (16, 32, 128)])


@check(points=1)
def custom_scale(impl, ctx):
    """dQ with an explicit sm_scale = 0.3"""
    _feature(impl, ctx, "scale", [(64, 32, False)], sm_scale=0.3)


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
                    "accumulate in registers and store once."
                )


@check(points=4)
def assembly(impl, ctx):
    """flash_attention returns what your kernels 04-07 give, called one by one (forward saves, backward passes on)"""
    _assembly_case(impl, ctx, 64, 16, False, "assembly0")
    _assembly_case(impl, ctx, 80, 16, True, "assembly1")


@check(points=2)
def autograd(impl, ctx):
    """flash_attention's gradient matches central finite differences of attention along random directions"""
    # fp32 in the interpreter; on a GPU tl.dot rounds fp32 to TF32, so the GPU case runs in fp16.
    dtype, shape = (torch.float16, (2, 4, 300, 64)) if ctx.gpu else (torch.float32, (2, 2, 37, 16))
    for causal in (False, True):
        _directional_check(impl, ctx, *shape, causal, f"fd{int(causal)}", dtype)


CHECKS = [dq, ragged, causal, strides_and_head_dims, custom_scale, bf16_inputs, deterministic, assembly, autograd]
