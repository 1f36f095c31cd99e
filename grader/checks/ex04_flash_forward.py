"""Checks for exercise 04: the FlashAttention forward kernel, o and lse."""

import math

import torch

from common import reference
from common.compare import (
    CheckFailed,
    call,
    constant_factor,
    expect_close,
    expect_tensor,
    expect_tuple,
    rows_wrong,
    span,
)
from common.shapes import attention_scale
from common.tolerance import WEIGHT_TOL, allowed_error
from grader.checks import BLOCK_GUESSES, LOG2E, layouts
from grader.checks.maps import probe_width, region_map
from grader.core import check

# The exercise: grader/exercises.py finds it from this module's name, ex<folder>.py.
TITLE = "FlashAttention forward"
MODULE = "flash_forward"
FUNCTIONS = ("flash_attention_forward",)

ROWS = 64  # rows per query block in the maps and tile summaries (the interpreter config's BLOCK_M)


# ----------------------------------------------------------------------------- running a case
class _Case:
    """One call of the student's function: inputs, outputs and references."""

    def __init__(
        self,
        impl,
        ctx,
        B,
        H,
        N,
        d,
        causal,
        tag,
        dtype=torch.float16,
        strided=False,
        qk_magnitude=1.0,
        sm_scale=None,
        dominant=False,
    ):
        self.impl, self.causal, self.sm_scale, self.dtype = impl, causal, sm_scale, dtype
        self.q, self.k, self.v = (
            ctx.randn((B, H, N, d), dtype, f"{tag}.{name}", scale=s)
            for name, s in (("q", qk_magnitude), ("k", qk_magnitude), ("v", 1.0))
        )
        if dominant:
            self.q, self.k = layouts.dominant_first_key(self.q, self.k, self.scale, causal)
        if strided:  # q, k, v each stored in a different order, viewed as [B, H, N, d]
            self.q, self.k, self.v = layouts.mixed(self.q, self.k, self.v)
        flags = [str(dtype)[6:], "causal" if causal else "non-causal"]
        if strided:
            flags.append(f"layouts {layouts.describe(self.q, self.k, self.v)}")
        if dominant:
            flags.append("key 0 the largest score of each row")
        if qk_magnitude != 1.0:
            flags.append(f"q, k scaled by {qk_magnitude:g}")
        if sm_scale is not None:
            flags.append(f"sm_scale={sm_scale:g}")
        self.what = f"attention B={B} H={H} N={N} d={d} ({', '.join(flags)})"
        kwargs = {"causal": causal} | ({"sm_scale": sm_scale} if sm_scale is not None else {})
        self.o, self.lse = expect_tuple(
            self.what, call(impl.flash_attention_forward, self.q, self.k, self.v, **kwargs), 2
        )
        expect_tensor(f"{self.what}: o", self.o, (B, H, N, d), dtype)
        expect_tensor(f"{self.what}: lse", self.lse, (B, H, N), torch.float32)
        self.ref_o, self.ref_lse = reference.attention(self.q, self.k, self.v, causal, sm_scale)
        self.low_o, self.low_lse = reference.attention_lowp(self.q, self.k, self.v, causal, sm_scale)

    @property
    def scale(self):
        return attention_scale(self.q.shape[-1], self.sm_scale)

    def check_o(self):
        blocks = (ROWS, self.q.shape[-1])
        try:  # the suspects (costly to simulate) only when it fails
            expect_close(f"{self.what}: o", self.o, self.ref_o, self.low_o, self.dtype, blocks=blocks)
        except CheckFailed:
            expect_close(
                f"{self.what}: o",
                self.o,
                self.ref_o,
                self.low_o,
                self.dtype,
                blocks=blocks,
                suspects=_o_suspects(self),
                diagnose=lambda m: _diagnose_o(self, m),
            )

    def check_lse(self):
        try:
            expect_close(f"{self.what}: lse", self.lse, self.ref_lse, self.low_lse, self.dtype, blocks=(ROWS,))
        except CheckFailed:
            expect_close(
                f"{self.what}: lse",
                self.lse,
                self.ref_lse,
                self.low_lse,
                self.dtype,
                blocks=(ROWS,),
                suspects=_lse_suspects(self),
                diagnose=lambda m: _diagnose_lse(self, m),
            )


# ----------------------------------------------------------------------------- what known bugs output
def _attention(q, k, v, scale, visible):
    """float64 attention in which `visible` [N, N_k] says which keys each query sees."""
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    s = s.masked_fill(~visible.to(s.device), -math.inf)
    return torch.softmax(s, dim=-1) @ v.double()


def _visible(n, n_k, causal, device):
    i = torch.arange(n, device=device)[:, None]
    j = torch.arange(n_k, device=device)[None, :]
    return (j <= i) if causal else torch.ones(n, n_k, dtype=torch.bool, device=device)


def _o_suspects(case):
    q, k, v, N, scale = case.q, case.k, case.v, case.q.shape[-2], case.scale
    see = _visible(N, N, case.causal, q.device)
    out = {
        "exp2 is used but log2(e) is not folded into the scale: exp2(x) = exp(x * ln 2), so use "
        "qk_scale = sm_scale * log2(e) for the scores": _attention(q, k, v, scale / LOG2E, see),
        "the scores carry the factor log2(e) but go through exp, not exp2: use tl.math.exp2 everywhere "
        "(or drop the log2(e) factor)": _attention(q, k, v, scale * LOG2E, see),
        "sm_scale is never applied to the scores (use qk_scale, which includes it)": _attention(q, k, v, LOG2E, see),
        "sm_scale is applied twice": _attention(q, k, v, scale * scale, see),
    }
    s = _scores(case)
    l = torch.exp(s - s.amax(-1, keepdim=True)).sum(-1, keepdim=True)  # l_i at the end of the loop
    out["o is never divided by l_i: after the loop, o = acc / l_i (acc holds the unnormalised sum of p @ V)"] = (
        case.ref_o * l
    )
    out.update(
        layouts.stride_suspects({"q": q, "k": k, "v": v}, lambda t: _attention(t["q"], t["k"], t["v"], scale, see))
    )
    if case.sm_scale is not None:
        out["the sm_scale argument is ignored and 1/sqrt(d) is used instead: use the qk_scale the wrapper passes"] = (
            _attention(q, k, v, attention_scale(q.shape[-1]), see)
        )
    if case.causal:
        out["the causal mask is missing: keys j > i get weight"] = _attention(
            q, k, v, scale, _visible(N, N, False, q.device)
        )
        for bm in BLOCK_GUESSES:
            if bm < N:
                i = torch.arange(N, device=q.device)[:, None]
                diagonal_only = see & (torch.arange(N, device=q.device)[None, :] >= i // bm * bm)
                out[
                    f"causal attention visits only the diagonal block (as with BLOCK_M={bm}): every query block "
                    "after the first also needs all key blocks left of the diagonal, unmasked, before the "
                    "masked diagonal block"
                ] = _attention(q, k, v, scale, diagonal_only)
    else:
        out["a causal mask is applied although causal=False"] = _attention(
            q, k, v, scale, _visible(N, N, True, q.device)
        )
        for bn in BLOCK_GUESSES:
            pad = -N % bn
            if pad:  # keys past N read as zeros: score 0, so weight exp(0 - m), times a zero v row
                kp, vp = (torch.cat([t, t.new_zeros(*t.shape[:-2], pad, t.shape[-1])], -2) for t in (k, v))
                out[
                    f"padded keys past N get weight (as with BLOCK_N={bn}): in the last key block set the "
                    "scores of keys j >= N to -inf"
                ] = _attention(q, kp, vp, scale, _visible(N, N + pad, False, q.device))
    return out


def _scores(case):
    s = (case.q.double() @ case.k.double().transpose(-1, -2)) * case.scale
    return s.masked_fill(~_visible(s.shape[-2], s.shape[-1], case.causal, s.device), -math.inf)


def _lse_suspects(case):
    s = _scores(case)
    row_max = s.amax(-1)
    return {
        "lse is in base 2: m_i + log2(l_i) is the log2-sum-exp2 of the base-2 scores; divide it by "
        "log2(e) to get the natural log": case.ref_lse * LOG2E,
        "lse is the log-sum-exp of the unscaled scores q k^T (apply sm_scale)": torch.logsumexp(s / case.scale, -1),
        "lse is missing the running max: store m + log(l), not log(l) alone": case.ref_lse - row_max,
        "lse holds only the running max: add log(l_i)": row_max,
    }


# ----------------------------------------------------------------------------- diagnoses
_NAN = (
    "NaN in the output: a row computed exp2(-inf - (-inf)) (its running max was still -inf when it met "
    "a fully masked block), divided 0 by l_i = 0, or overflowed (exp2 of scores not shifted by the running "
    "max reaches inf, and inf / inf is NaN: use exp2(qk * qk_scale - m_new)). Masked scores must be -inf only where "
    "the row has (or will have) a visible key; load padded K/V with other=0.0, never -inf"
)


_STRICT = (
    "the causal mask hides the diagonal (j < i instead of j <= i): row 0 then sees no key at all, its "
    "running max stays -inf and exp2(-inf - (-inf)) is NaN. Query i sees keys j <= i, itself included"
)


def _diagnose_o(case, m):
    if torch.isnan(m.out).any():
        nan_rows = torch.isnan(m.out).any(-1).flatten(0, -2).any(0)  # [N]
        if case.causal and bool(nan_rows[0]) and not bool(nan_rows[1:].any()):
            return _STRICT
        return _NAN
    factor = constant_factor(m)
    if factor is not None:
        return f"o is {factor:.4g} times the expected output everywhere: check the final o = acc / l_i"
    bad = rows_wrong(m, -2)
    last = (len(bad) - 1) // ROWS * ROWS  # first row of the last query block
    hints = []
    if last > 0 and not bad[:last].any():
        N = case.q.shape[-2]
        if N % ROWS:
            hints.append(
                f"only the last query block is wrong (rows {span(bad)}): check the masks that involve N "
                "there (rows >= N, keys >= N)"
            )
        else:
            hints.append(
                f"only the last query block is wrong (rows {span(bad)}) although N={N} needs no mask: "
                "the offsets of that block are off. Check offs_m = start_m * BLOCK_M + tl.arange(0, "
                "BLOCK_M), the grid (cdiv(N, BLOCK_M) query blocks) and the causal range of that block"
            )
    probe = _probe(case)
    return "\n".join(hints + [probe] if probe else hints) or None


def _diagnose_lse(case, m):
    o_err = (case.o.double() - case.ref_o).abs().cpu().nan_to_num(nan=math.inf)
    o_ok = bool((o_err <= allowed_error(case.ref_o.cpu(), case.low_o.cpu(), case.dtype)).all())
    where = (
        "o is right, so the softmax itself works: only the conversion to lse is off"
        if o_ok
        else "o is wrong too: fix o first (see the other checks)"
    )
    factor = constant_factor(m)
    if factor is not None:
        return (
            f"lse is {factor:.4g} times the expected value everywhere (ln 2 = 0.6931, log2(e) = 1.4427); "
            f"lse is the natural log of sum_j exp(sm_scale * q.k_j); {where}"
        )
    if torch.isnan(m.out).any():
        return _NAN
    return where


def _probe(case):
    """Run the student's kernel with V replaced by a one-hot code of each key's range.

    Then o[i, c] is the total attention weight row i gives the keys of range c: comparing it with
    the reference shows which (query block, key range) regions the kernel gets wrong.
    """
    q, k = case.q, case.k
    B, H, N, d = q.shape
    width = probe_width(N, d)
    v = torch.zeros(B, H, N, d, dtype=q.dtype, device=q.device)
    v[..., torch.arange(N), torch.arange(N) // width] = 1
    kwargs = {"causal": case.causal} | ({"sm_scale": case.sm_scale} if case.sm_scale is not None else {})
    try:
        got, _ = case.impl.flash_attention_forward(q, k, v, **kwargs)
    except Exception:  # noqa: BLE001 - the probe is advice only; the check has already failed
        return None
    ranges = -(-N // width)
    got = got.double().cpu()[..., :ranges]
    ref = reference.attention(q, k, v, case.causal, case.sm_scale)[0].cpu()[..., :ranges]
    if (got - ref).abs().max() <= WEIGHT_TOL:
        return (
            "the attention weights are right (probed with a one-hot V), so the error is in how V is read "
            "or o is written: check V's pointers and strides and the store of o"
        )
    return _classify(case, got, ref, width) + "\n" + _weight_map(got, ref, width)


def _weight_map(got, ref, width):
    """One line per query block, one character per key range: how the weights compare."""
    header = (
        f"Attention weights per (query block of {ROWS} rows, key range of {width} keys), probed with a "
        "one-hot V: '.' right, '-' hidden and right, 'm' too little weight, '+' too much, '?' NaN"
    )
    return region_map(got, ref, ROWS, width, header, "rows", WEIGHT_TOL)


def _classify(case, got, ref, width):
    N = got.shape[-2]
    if got.isnan().any():
        return _NAN
    total = got.sum(-1)
    if (total < 1 - WEIGHT_TOL).any():
        too_large_l = (
            "l_i grows too fast: whenever the running max grows, rescale l_i by alpha = exp2(m_old - m_new), like acc"
        )
        if case.causal or N % BLOCK_GUESSES[0] == 0:
            return f"the weights sum to less than 1: {too_large_l}"
        return (
            "the weights of the real keys sum to less than 1: weight leaks to padded keys j >= N (set their "
            f"scores to -inf), or {too_large_l}"
        )
    if (total > 1 + WEIGHT_TOL).any():
        return (
            "the weights sum to more than 1: acc and l_i disagree. Whenever the running max grows, rescale "
            "both acc and l_i by alpha = exp2(m_old - m_new)"
        )
    if case.causal:
        if ((got - ref) > WEIGHT_TOL)[..., ref.amax(tuple(range(ref.dim() - 2))) == 0].any():
            return (
                "keys right of the diagonal (j > i) get weight: the causal mask is missing or wrong (or V rows "
                "are read from the wrong place)"
            )
        rows = torch.arange(N)[:, None]
        left = torch.arange(got.shape[-1])[None, :] * width + width <= rows // ROWS * ROWS  # ranges left of the block
        if ((ref - got) > WEIGHT_TOL)[..., left].any():
            return (
                "rows get too little weight from keys left of their diagonal block: in causal mode visit every "
                "key block left of the diagonal (unmasked), then the diagonal block (masked)"
            )
    return (
        "the weights sum to 1 but are spread wrongly: check the scale (exp2 with qk_scale = sm_scale * "
        "log2(e)) and the rescale of acc and l_i by alpha = exp2(m_old - m_new) whenever the max grows"
    )


# ----------------------------------------------------------------------------- checks
# Points follow the ideas of the lesson: one check per idea, run on inputs that keep the other ideas
# simple. Every case but those of online_softmax makes key 0 the largest score of each row (see
# layouts.dominant_first_key), so a rescale bug in the core loop cannot cost the feature checks; the
# checks of other ideas than the ragged tail use N a multiple of every block (64, 128).
SIMPLE = (32, 64, False)  # one key block of the interpreter's BLOCK_N = 32: no rescale, no mask


def _outputs(impl, ctx, tag, cases, B=1, H=1, **options):
    """Check o for each (N, d, causal) of `cases`; B = H = 1 unless given (the core cases and the
    layouts use B = H = 2, where a (batch, head) offset shows)."""
    for i, (N, d, causal) in enumerate(cases):
        _Case(impl, ctx, B, H, N, d, causal, f"{tag}{i}", **options).check_o()


def _simplest_case_fails(impl, ctx):
    """A reason when o is wrong even on one key block (non-causal, N=32: nothing to rescale or mask)."""
    try:
        _outputs(impl, ctx, "simple", [SIMPLE])
    except Exception as exc:  # noqa: BLE001 - any failure of the simplest case
        return str(exc).splitlines()[0]
    return None


def _feature(impl, ctx, run):
    """Run a feature check; when it fails and the simplest case fails too, say which check to fix first."""
    try:
        run()
    except CheckFailed as exc:
        reason = _simplest_case_fails(impl, ctx)
        if reason is None:
            raise
        raise CheckFailed(
            f"fix online_softmax and scale_convention first: even the simplest case (N=32, one key "
            f"block, non-causal) is wrong ({reason}), so this check cannot be graded apart from "
            f"it.\n{exc}"
        ) from None


@check(points=6)
def online_softmax(impl, ctx):
    """o, non-causal, several key blocks: the running max, the alpha rescale of acc and l_i, o = acc / l_i"""
    N = 512 if ctx.gpu else 128
    _outputs(impl, ctx, "core", [(N, 64, False)], B=2, H=2)
    _outputs(impl, ctx, "large", [(N, 64, False)], qk_magnitude=6.0)


@check(points=4)
def ragged(impl, ctx):
    """o, non-causal, N = 1, 17, 100, 129 (and 1000 on a GPU): padded keys masked, rows >= N not stored"""
    sizes = (1, 17, 100, 129) + ((1000,) if ctx.gpu else ())
    _feature(impl, ctx, lambda: _outputs(impl, ctx, "ragged", [(N, 64, False) for N in sizes], dominant=True))


@check(points=2)
def causal_one_block(impl, ctx):
    """o, causal, N = 1, 17, 32 (one key block: the mask j <= i inside the diagonal block)"""
    _feature(impl, ctx, lambda: _outputs(impl, ctx, "causal1_", [(N, 64, True) for N in (1, 17, 32)]))


@check(points=4)
def causal_many_blocks(impl, ctx):
    """o, causal, N = 100, 129, 192 (and 1000 on a GPU): blocks left of the diagonal unmasked, the diagonal masked"""
    sizes = (100, 129, 192) + ((1000,) if ctx.gpu else ())
    _feature(impl, ctx, lambda: _outputs(impl, ctx, "causal", [(N, 64, True) for N in sizes], dominant=True))


@check(points=3)
def scale_convention(impl, ctx):
    """o on one key block with the default scale and with sm_scale = 0.3: qk_scale = sm_scale * log2(e) with exp2"""
    _outputs(impl, ctx, "default", [SIMPLE])
    _outputs(impl, ctx, "scale", [(32, 32, False)], sm_scale=0.3)
    _feature(impl, ctx, lambda: _outputs(impl, ctx, "scale_many", [(128, 32, False)], sm_scale=0.3, dominant=True))


@check(points=4)
def lse_output(impl, ctx):
    """lse: natural-log log-sum-exp of the scaled scores, float32 [B, H, N], N = 32 and 128"""

    def run():
        for i, (N, causal) in enumerate(((32, False), (128, False))):
            _Case(impl, ctx, 1, 2, N, 64, causal, f"lse{i}", dominant=True).check_lse()

    _feature(impl, ctx, run)


@check(points=4)
def strides_and_head_dims(impl, ctx):
    """o with q, k, v each in its own memory layout (no copy: use all four strides), and d = 16, 32, 128"""

    def run():
        _outputs(impl, ctx, "strided", [(128, 64, False)], strided=True, dominant=True, B=2, H=2)
        _outputs(impl, ctx, "dims", [(32, d, False) for d in (16, 32, 128)], dominant=True)

    _feature(impl, ctx, run)


@check(points=2, gpu_only=True)
def bf16_inputs(impl, ctx):
    """o and lse with bfloat16 inputs (GPU only: bf16 tl.dot is broken in the interpreter)"""
    for i, (N, causal) in enumerate(((100, False), (1000, False), (1000, True))):
        case = _Case(impl, ctx, 2, 2, N, 64, causal, f"bf16{i}", dtype=torch.bfloat16)
        case.check_o()
        case.check_lse()


@check(points=1, gpu_only=True)
def memory_linear(impl, ctx):
    """peak extra GPU memory during the call stays linear in N (N = 4096 and 16384: nothing N x N)"""
    for N in (4096, 16384):
        q, k, v = (ctx.randn((1, 4, N, 64), torch.float16, f"memory{N}.{n}") for n in "qkv")
        impl.flash_attention_forward(q, k, v, causal=True)  # compile and autotune outside the measurement
        # Read in your process, where the call runs: what PyTorch's allocator held at the call's peak
        # beyond what it held before.
        _, extra = impl.flash_attention_forward.with_peak_memory(q, k, v, causal=True)
        if extra is None:
            raise CheckFailed("the peak GPU memory of your call could not be read; please report this")
        needed = q.numel() * q.element_size() + 4 * q.shape[0] * q.shape[1] * N  # o and lse
        if extra > 2 * needed + (4 << 20):
            raise CheckFailed(
                f"at N={N} the call allocated {extra / 2**20:.1f} MiB beyond its inputs, but o and lse need only "
                f"{needed / 2**20:.1f} MiB: something grows faster than N (an N x N scores or probabilities "
                "tensor?). FlashAttention keeps each tile of scores on chip and never writes it out."
            )


CHECKS = [
    online_softmax,
    ragged,
    causal_one_block,
    causal_many_blocks,
    scale_convention,
    lse_output,
    strides_and_head_dims,
    bf16_inputs,
    memory_linear,
]
