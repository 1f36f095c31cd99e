"""Input shapes for the attention checks (04-07): memory layouts that differ per tensor, and scores
whose row maximum sits on key 0.

Different layouts per tensor: a kernel that reads k with q's strides (or ignores them) reads the
wrong values, which one layout shared by every tensor would hide.

Key 0 first: when every row's largest score is its score with key 0 (visible to every query, and
in the first key block a kernel visits), the running maximum never grows after the first block,
so alpha = exp2(m_old - m_new) is exactly 1 and a kernel that forgets to rescale acc or l_i still
gets these cases right. Feature checks (masks, causal structure, strides, lse) run on such inputs,
so that a bug in the online-softmax core costs the points of the check that grades the core only.
"""

import torch

# The order each tensor is stored in, as a permutation of [B, H, N, d]: q as [B, N, H, d], k as
# [H, B, N, d], v as [B, H, d, N] (d not the fastest axis), do as [N, B, H, d].
ORDERS = ((0, 2, 1, 3), (1, 0, 2, 3), (0, 1, 3, 2), (2, 0, 1, 3))
NAMES = {
    (0, 2, 1, 3): "[B, N, H, d]",
    (1, 0, 2, 3): "[H, B, N, d]",
    (0, 1, 3, 2): "[B, H, d, N]",
    (2, 0, 1, 3): "[N, B, H, d]",
}
MARGIN = 0.5  # natural-log units by which key 0's score beats every other score of its row


def stored_as(x: torch.Tensor, order) -> torch.Tensor:
    """The values of `x` [B, H, N, d], stored in the axis order `order` and viewed as [B, H, N, d]."""
    inverse = [order.index(axis) for axis in range(4)]
    return x.permute(*order).contiguous().permute(*inverse)


def mixed(*tensors):
    """Each tensor in its own layout (ORDERS, in turn)."""
    return tuple(stored_as(t, ORDERS[i % len(ORDERS)]) for i, t in enumerate(tensors))


def describe(*tensors) -> str:
    names = "qkvd"
    return ", ".join(f"{names[i] if i < 3 else 'do'} {NAMES[ORDERS[i % len(ORDERS)]]}" for i in range(len(tensors)))


def dominant_first_key(q: torch.Tensor, k: torch.Tensor, scale: float, causal: bool = False):
    """(q, k) changed on their last coordinate so that key 0 beats every other visible key of each
    row by MARGIN (and by little more, so the other keys keep their weight): k[..., 0, -1] = 1,
    k[..., 1:, -1] = 0, and q[..., i, -1] the boost row i needs."""
    q, k = q.clone(), k.clone()
    k[..., -1] = 0
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    n = s.shape[-1]
    if n == 1:
        return q, k
    others = s[..., 1:]
    if causal:  # row i sees keys 1..i besides key 0
        hidden = torch.ones(n, n - 1, dtype=torch.bool, device=s.device).triu(0)  # key j + 1 > i
        others = others.masked_fill(hidden, -torch.inf)
    best = others.amax(-1)
    need = torch.where(torch.isfinite(best), best - s[..., 0] + MARGIN, torch.zeros_like(best))
    k[..., 0, -1] = 1
    q[..., -1] = (need / scale).to(q.dtype)
    return q, k


def stride_suspects(tensors: dict, simulate) -> dict:
    """The stride bugs of an attention kernel, each simulated: every tensor read as if contiguous
    [B, H, N, d], and each tensor read with another's strides. `tensors` maps names to the inputs
    in the kernel's argument order; `simulate(tensors)` is the output a kernel reading those would give."""
    names = ", ".join(tensors)
    out = {}
    if not all(t.is_contiguous() for t in tensors.values()):
        dense = {
            n: torch.as_strided(t, t.shape, torch.empty(t.shape, device="meta").stride()) for n, t in tensors.items()
        }
        out[
            f"the strides are ignored: {names} are read as if contiguous [B, H, N, d]; address q[b, h, n, c] "
            "as q_ptr + b * stride_qb + h * stride_qh + n * stride_qn + c * stride_qd"
        ] = simulate(dense)
    for a, t in tensors.items():
        for b, u in tensors.items():
            if a != b and t.stride() != u.stride():
                read = dict(tensors, **{a: torch.as_strided(t, t.shape, u.stride())})
                out[
                    f"{a} is read with the strides of {b}: pass each tensor's own strides ({a}.stride() for {a}) "
                    f"and address {a} with them"
                ] = simulate(read)
    return out
