"""What the backward checks of exercises 06 and 07 share: a backward case with its reference
gradients, a simulator of the usual bugs, and the visibility probe that maps which (block, range)
regions a kernel gets wrong.

Every case feeds the student's kernel reference values of lse and delta (float64 math, cast to
float32), so each exercise is graded on its own: a bug in exercise 04 or 05 cannot fail it.
"""

import math

import torch

from common import reference
from common.compare import CheckFailed, expect_close, rows_wrong, span
from common.shapes import attention_scale
from common.tolerance import PROBE_HALFWAY, SCALE_MATCH, allowed_error
from grader.checks import BLOCK_GUESSES, LOG2E, layouts
from grader.checks.maps import probe_width, region_map

LN2 = 0.6931471805599453


# ----------------------------------------------------------------------------- a backward case
class BackwardCase:
    """Inputs of one backward call (q, k, v, do, reference lse and delta) and the reference gradients.

    negative=True builds inputs whose scores are all large and negative (q points away from a
    direction every key shares): lse is then very negative, and anything that lets a padded key
    (score 0) through gets exp(0 - lse), which overflows fp16. grads=False skips the reference
    gradients (for checks that only compare the kernel with itself).
    """

    def __init__(
        self,
        ctx,
        B,
        H,
        N,
        d,
        causal,
        tag,
        dtype=torch.float16,
        strided=False,
        sm_scale=None,
        qk_magnitude=1.0,
        negative=False,
        grads=True,
    ):
        self.causal, self.sm_scale, self.dtype = causal, sm_scale, dtype
        shape = (B, H, N, d)
        if negative:
            shared = ctx.randn((B, H, 1, d), torch.float32, f"{tag}.shared")
            self.k = (shared + 0.3 * ctx.randn(shape, torch.float32, f"{tag}.k")).to(dtype)
            self.q = (-3.0 * shared + 0.3 * ctx.randn(shape, torch.float32, f"{tag}.q")).to(dtype)
        else:
            self.q = ctx.randn(shape, dtype, f"{tag}.q", scale=qk_magnitude)
            self.k = ctx.randn(shape, dtype, f"{tag}.k", scale=qk_magnitude)
        self.v = ctx.randn(shape, dtype, f"{tag}.v")
        self.do = ctx.randn(shape, dtype, f"{tag}.do")
        if strided:  # q, k, v, do each stored in a different order, viewed as [B, H, N, d]
            self.q, self.k, self.v, self.do = layouts.mixed(self.q, self.k, self.v, self.do)
        o, lse = reference.attention(self.q, self.k, self.v, causal, sm_scale)
        self.lse = lse.float()
        self.delta = reference.attention_delta(o, self.do).float()
        if grads:
            self.ref = reference.attention_grads(self.q, self.k, self.v, self.do, causal, sm_scale)
            self.lowp = reference.attention_grads_lowp(self.q, self.k, self.v, self.do, causal, sm_scale)

        flags = [str(dtype)[6:], "causal" if causal else "non-causal"]
        if strided:
            flags.append(f"layouts {layouts.describe(self.q, self.k, self.v, self.do)}")
        if qk_magnitude != 1.0:
            flags.append(f"q, k scaled by {qk_magnitude:g}")
        if negative:
            flags.append("all scores large and negative")
        if sm_scale is not None:
            flags.append(f"sm_scale={sm_scale:g}")
        self.what = f"B={B} H={H} N={N} d={d} ({', '.join(flags)})"
        self.kwargs = {"causal": causal} | ({"sm_scale": sm_scale} if sm_scale is not None else {})

    @property
    def N(self):
        return self.q.shape[-2]

    @property
    def scale(self):
        return attention_scale(self.q.shape[-1], self.sm_scale)

    @property
    def args(self):
        return self.q, self.k, self.v, self.do, self.lse, self.delta

    def visible(self, causal=None):
        """[N, N] bool: query i (row) sees key j (column)."""
        return visible(self.N, self.causal if causal is None else causal)

    def simulate(
        self, see=None, score_factor=1.0, lse_factor=1.0, use_delta=True, grad_scale=None, scale=None, tensors=None
    ):
        """(dq, dk, dv) in float64 on the CPU, computed tile-free from the given lse and delta, with knobs
        that reproduce known bugs: P = exp(score_factor * S - lse_factor * lse) on the keys `see`,
        dS without delta, dK and dQ scaled by grad_scale instead of sm_scale."""
        scale = self.scale if scale is None else scale
        grad_scale = scale if grad_scale is None else grad_scale
        q, k, v, do = (t.detach().double().cpu() for t in (tensors or (self.q, self.k, self.v, self.do)))
        lse, delta = self.lse.double().cpu(), self.delta.double().cpu()
        see = self.visible() if see is None else see
        s = (q @ k.transpose(-1, -2)) * scale
        p = torch.exp(score_factor * s - lse_factor * lse[..., None]).masked_fill(~see, 0.0)
        dv = p.transpose(-1, -2) @ do
        dp = do @ v.transpose(-1, -2)
        ds = p * (dp - delta[..., None]) if use_delta else p * dp
        return grad_scale * ds @ k, grad_scale * ds.transpose(-1, -2) @ q, dv


def visible(n, causal):
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return (j <= i) if causal else torch.ones(n, n, dtype=torch.bool)


def common_suspects(case, which: int, name: str):
    """{cause: wrong output} for the bugs 06 and 07 share; which = 0 (dq), 1 (dk) or 2 (dv)."""
    sim = case.simulate
    out = {
        "lse is used in natural-log units inside exp2: convert it where you load it (lse * LOG2E), "
        "since exp2(x) = exp(x * ln 2)": sim(lse_factor=LN2)[which],
        "the scores and lse carry log2(e) but go through exp: use tl.math.exp2 (or drop log2(e) from both)": sim(
            score_factor=LOG2E, lse_factor=LOG2E
        )[which],
        "exp2 is used but log2(e) is not folded into the scale: use qk_scale = sm_scale * log2(e) for the scores": sim(
            score_factor=LN2
        )[which],
    }
    if which != 2:  # dV does not involve dS or sm_scale
        out["delta is not subtracted: dS = P * (dP - delta), not P * dP"] = sim(use_delta=False)[which]
        out[
            f"sm_scale is missing on {name}: {name} = sm_scale * (sum of dS products); apply it once after the loop"
        ] = sim(grad_scale=1.0)[which]
        out[f"sm_scale is applied twice to {name}"] = sim(grad_scale=case.scale**2)[which]
        out[
            f"{name} is scaled by qk_scale = sm_scale * log2(e) instead of sm_scale: the log2(e) factor belongs "
            "to the exponent only"
        ] = sim(grad_scale=case.scale * LOG2E)[which]
    if case.sm_scale is not None:
        out["the sm_scale argument is ignored and 1/sqrt(d) is used instead"] = sim(
            scale=attention_scale(case.q.shape[-1])
        )[which]
    tensors = {"q": case.q, "k": case.k, "v": case.v, "do": case.do}
    out.update(layouts.stride_suspects(tensors, lambda read: sim(tensors=list(read.values()))[which]))
    if case.causal:
        out["the causal mask is missing: keys j > i get P > 0"] = sim(see=case.visible(causal=False))[which]
        out["the causal mask hides the diagonal: query i sees key j = i (keep offs_m >= offs_n, not >)"] = sim(
            see=case.visible() & ~torch.eye(case.N, dtype=torch.bool)
        )[which]
    else:
        out[
            "a causal mask is applied although causal=False: the non-causal path must not mask (Triton's "
            "tutorial had this bug)"
        ] = sim(see=case.visible(causal=True))[which]
    return out


def expect_grad(case, name, out, which, blocks, suspects, diagnose):
    """expect_close for one gradient; the suspects (costly to simulate) are built only on failure."""
    ref, lowp = case.ref[which], case.lowp[which]
    what = f"{name} for {case.what}"
    try:
        expect_close(what, out, ref, lowp, case.dtype, blocks=blocks)
    except CheckFailed:
        expect_close(what, out, ref, lowp, case.dtype, blocks=blocks, suspects=suspects(), diagnose=diagnose)


def is_close(case, out, which) -> bool:
    ref = case.ref[which].detach().double().cpu()
    err = (out.detach().double().cpu() - ref).abs().nan_to_num(nan=math.inf)
    return bool((err <= allowed_error(ref, case.lowp[which].detach().cpu(), case.dtype)).all())


def nan_advice(case, name, padded="keys"):
    """Advice for NaN in a gradient. padded: which padded rows can cause it in this kernel ("keys" in
    exercise 07, where a padded key's P joins a real row; "queries" in 06, where it cannot)."""
    advice = (
        f"NaN in {name}: an inf met a zero, or exp2(-inf - (-inf)). Load every tile with its rows masked "
        "and other=0.0 (never -inf), lse and delta included"
    )
    if case.N % min(BLOCK_GUESSES) == 0 and all(case.N % b == 0 for b in BLOCK_GUESSES if b <= case.N):
        return advice + "; N is a multiple of the blocks here, so look for an exp2 of an unshifted score or a division"
    if padded == "keys":
        advice += (
            f"; here N={case.N} is not a multiple of the block: a padded key (j >= N) has score 0 and "
            "P = exp2(0 - lse), which overflows fp16 when a row's scores are all very negative, and inf "
            "times K = 0 is NaN: give the padded keys P = 0 (mask them, keys < N)"
        )
    else:
        advice += (
            f"; here N={case.N} is not a multiple of the block. Padded keys cannot cause it (their rows of "
            "dK and dV are never stored), but a padded query row can: it must load q, dO, lse and delta "
            "as 0 (mask rows < N, other=0.0), so that P * dO and P * (dP - delta) add exactly 0"
        )
    return advice


def scale_advice(case, name, factor):
    """Advice for an output that is `factor` times the reference everywhere."""
    if abs(factor) < 1e-3:
        return (
            f"{name} is zero everywhere: nothing was accumulated into it (are the loops empty? is the "
            "accumulator stored?)"
        )
    known = {
        1 / case.scale: f"sm_scale is missing on {name}: multiply the accumulated sum by sm_scale once, after the loop",
        case.scale: f"sm_scale is applied twice to {name}",
        LOG2E: f"{name} carries an extra log2(e): the log2(e) factor belongs to the exponent only",
        case.scale * LOG2E: f"{name} is scaled by qk_scale = sm_scale * log2(e) where sm_scale alone belongs",
        1 / (case.scale * LOG2E): f"sm_scale is missing on {name}, and a log2(e) is missing too",
        LN2: f"{name} carries an extra ln(2)",
    }
    guess = next((why for c, why in known.items() if abs(factor / c - 1) < SCALE_MATCH), None)
    text = f"{name} is {factor:.4g} times the expected gradient everywhere"
    return f"{text}: {guess}" if guess else f"{text}: check the scale factors (sm_scale = {case.scale:.4g})"


def visibility_map(got, expected, block, width, row_name, col_name, rows_name):
    """One line per block of `block` rows, one character per range of `width` columns."""
    header = (
        f"Which (query, key) pairs your kernel counts, probed with q = 0 and lse = 0 (so P = 1 wherever a "
        f"key is visible), per ({row_name} block of {block}, {col_name} range of {width}): '.' right, "
        "'-' hidden and right, 'm' pairs missing, '+' extra pairs, '?' NaN"
    )
    return region_map(got, expected, block, width, header, rows_name, PROBE_HALFWAY)


def classify_map(case, got, expected, width, columns):
    """A sentence on where the probe's counts differ; got, expected: [B, H, rows, ranges]."""
    if got.isnan().any():
        return nan_advice(case, "the probe", padded="queries" if columns == "queries" else "keys")
    ranges = got.shape[-1]
    sizes = torch.bincount(torch.arange(case.N) // width, minlength=ranges).double()  # columns per range
    e = expected.flatten(0, -3)[0]  # the same for every (batch, head)
    extra = ((got - expected) > PROBE_HALFWAY).flatten(0, -3).any(0)
    missing = ((expected - got) > PROBE_HALFWAY).flatten(0, -3).any(0)
    wrong = extra | missing
    crossing = (e > 0) & (e < sizes)  # a range that the diagonal cuts for this row
    if case.causal and (extra & (e < sizes)).any():
        return (
            "pairs with key j > query i are counted: the causal mask is missing or wrong on the blocks that "
            "cross the diagonal (keep query i >= key j)"
        )
    if wrong[:, -1].any() and not wrong[:, :-1].any():
        return (
            f"only pairs with the last, partial range of {columns} are wrong: loop up to N itself (not to the "
            f"last full block) and mask the {columns} >= N"
        )
    if case.causal and not (wrong & ~crossing).any():
        return "only the blocks that cross the diagonal are wrong: they must be visited, with the mask query i >= key j"
    if missing.any() and not extra.any():
        return (
            "some blocks are never visited: check the loop bounds (causal: the blocks that cross the diagonal "
            "masked, the fully visible ones unmasked, the fully hidden ones skipped)"
        )
    return "some pairs are counted twice or wrongly masked: check the loop bounds and the masks"


def last_block_hint(m, N: int, block: int, things: str, block_kind: str, masks: str):
    """A hint when only the last block of `block` rows, where N ends, is wrong; else None."""
    bad = rows_wrong(m, -2)
    last = (N - 1) // block * block
    if last > 0 and not bad[:last].any():
        return (
            f"only the {things} of the last {block_kind} block are wrong ({things} {span(bad)}): check the masks "
            f"that involve N there ({masks}, the store)"
        )
    return None


def visibility_probe(case, run, per_key: bool, rows: int):
    """A map of which (query, key) pairs the student's kernel lets through, from one run of it on
    probe inputs: q = 0 and lse = 0, so P = 1 on every pair the kernel treats as visible, and a
    one-hot tensor over ranges of `width` positions, so that the output's column c counts the
    visible partners in range c. `run(zeros, onehot, lse)` calls the kernel and returns that output:
    per key (dV, rows are keys, columns query ranges) or per query (dQ, the other way round); the
    map groups `rows` of them per program.
    None when the kernel fails on the probe (it is advice only: the check has already failed)."""
    B, H, N, d = case.q.shape
    width = probe_width(N, d)
    ranges = -(-N // width)
    zeros = torch.zeros(B, H, N, d, dtype=case.dtype, device=case.q.device)
    onehot = zeros.clone()
    onehot[..., torch.arange(N), torch.arange(N) // width] = 1
    lse = torch.zeros(B, H, N, dtype=torch.float32, device=case.q.device)
    try:
        got = run(zeros, onehot, lse).double().cpu()[..., :ranges]
    except Exception:  # noqa: BLE001 - the probe is advice only; the check has already failed
        return None
    visible = case.visible().double()  # [query, key]
    if per_key:
        visible = visible.transpose(0, 1)
    expected = (visible @ onehot[0, 0].double().cpu()[:, :ranges]).expand_as(got)
    if (got - expected).abs().max() <= PROBE_HALFWAY:
        return (
            "the (query, key) pairs your kernel visits and masks are right (probed with q = 0): the error is "
            "in the values, not in the loop bounds or masks"
        )
    this, other = ("key", "query") if per_key else ("query", "key")
    plural = {"key": "keys", "query": "queries"}
    return (
        classify_map(case, got, expected, width, plural[other])
        + "\n"
        + visibility_map(got, expected, rows, width, this, other, plural[this])
    )
