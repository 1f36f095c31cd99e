"""PyTorch reference implementations: the ground truth every exercise is graded against.

Each reference computes in float64 from the given inputs, so its own rounding error is far below
any kernel's. The `*_lowp` twins do the same computation the way plain PyTorch would in the input
dtype; the tolerance policy (common.tolerance) measures their error to decide how much error a
kernel may have.

Conventions shared by exercises 03-07:
  - lse is the natural-log log-sum-exp of each row of the *scaled* scores, float32 [B, H, N];
  - sm_scale defaults to 1/sqrt(d);
  - causal masks key j > query i (square attention, N_q == N_k).
"""

import torch

from common.shapes import attention_scale


# ----------------------------------------------------------------------------- 01 matmul
def matmul(a, b):
    return a.double() @ b.double()


def matmul_lowp(a, b):
    return a @ b


def matmul_tf32(a, b):
    """The product as a GPU's TF32 mode computes it, at its least precise: each fp32 input cut to
    TF32's 10 mantissa bits (truncated, not rounded), then multiplied and summed exactly."""
    return (_truncate_to_tf32(a).double() @ _truncate_to_tf32(b).double()).float()


def _truncate_to_tf32(x):
    return (x.float().contiguous().view(torch.int32) & ~0x1FFF).view(torch.float32)


# ----------------------------------------------------------------------------- 02-03 softmax
def softmax(x):
    """Row-wise softmax; a row with no finite entry (all -inf) gives zeros, not NaN."""
    return online_softmax(x)[0]


def online_softmax(x):
    """(softmax(x), lse) row-wise, in float64; lse is -inf for an all -inf row."""
    x = x.double()
    lse = torch.logsumexp(x, dim=-1)
    y = torch.exp(x - lse[:, None])
    return torch.nan_to_num(y, nan=0.0), lse


def softmax_lowp(x):
    return torch.nan_to_num(torch.softmax(x.float(), dim=-1)).to(x.dtype)


def online_softmax_lowp(x):
    return softmax_lowp(x), torch.logsumexp(x.float(), dim=-1)


# ----------------------------------------------------------------------------- 04 attention forward
def _scores(q, k, causal, sm_scale):
    s = (q @ k.transpose(-1, -2)) * sm_scale
    if causal:
        n_q, n_k = s.shape[-2:]
        future = torch.ones(n_q, n_k, dtype=torch.bool, device=s.device).triu(1)
        s = s.masked_fill(future, float("-inf"))
    return s


def attention(q, k, v, causal=False, sm_scale=None):
    """(o, lse) in float64 for q, k, v of shape [B, H, N, d]."""
    sm_scale = attention_scale(q.shape[-1], sm_scale)
    s = _scores(q.double(), k.double(), causal, sm_scale)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None])
    return p @ v.double(), lse


def attention_lowp(q, k, v, causal=False, sm_scale=None):
    """What plain PyTorch does in the input dtype: low-precision matmuls, fp32 softmax."""
    sm_scale = attention_scale(q.shape[-1], sm_scale)
    s = _scores(q, k, causal, sm_scale).float()
    lse = torch.logsumexp(s, dim=-1)
    p = torch.softmax(s, dim=-1).to(v.dtype)
    return p @ v, lse


# ----------------------------------------------------------------------------- 05-07 backward
def attention_delta(o, do):
    """delta_i = sum_j dO_ij * O_ij, float64 [B, H, N]."""
    return (o.double() * do.double()).sum(-1)


def attention_delta_lowp(o, do):
    return (o.float() * do.float()).sum(-1)


def _grads(q, k, v, do, causal, sm_scale, dtype):
    leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
    s = _scores(leaves[0], leaves[1], causal, sm_scale)
    p = torch.softmax(s.to(torch.promote_types(dtype, torch.float32)), dim=-1).to(dtype)
    (p @ leaves[2]).backward(do.to(dtype))
    return tuple(t.grad for t in leaves)


def attention_grads(q, k, v, do, causal=False, sm_scale=None):
    """(dq, dk, dv) in float64 by autograd through the reference attention."""
    sm_scale = attention_scale(q.shape[-1], sm_scale)
    return _grads(q, k, v, do, causal, sm_scale, torch.float64)


def attention_grads_lowp(q, k, v, do, causal=False, sm_scale=None):
    sm_scale = attention_scale(q.shape[-1], sm_scale)
    return _grads(q, k, v, do, causal, sm_scale, q.dtype)
