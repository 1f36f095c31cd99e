"""Exercise 07: dQ, the query-side half of the FlashAttention backward pass, and the assembled
autograd function.

    dq = attention_backward_dq(q, k, v, do, lse, delta, causal=False, sm_scale=None)
    o = flash_attention(q, k, v, causal=False, sm_scale=None)   # differentiable

One program owns one block of BLOCK_M query rows of one (batch, head). It keeps Q_i, dO_i, lse_i and
delta_i on chip and streams the key blocks K_j, V_j past them:

    P_ij  = exp(Q_i K_j^T * sm_scale - lse_i)
    dP_ij = dO_i V_j^T
    dS_ij = P_ij * (dP_ij - delta_i)
    dQ_i += sm_scale * dS_ij K_j

dQ_i is a sum over key blocks only, so its owner writes it once: no atomics.

flash_attention chains your exercises: the forward is exercise 04 (flash_attention_forward), the
backward runs exercise 05 (delta), exercise 06 (dK, dV) and this file's dQ. They are imported from
the sibling folders next to this one, so the function uses *your* kernels wherever the course lives.
"""

import functools

import torch
import triton
import triton.language as tl

from common.env import interpreting
from common.loader import load_sibling
from common.shapes import attention_scale, check_attention_tensors, check_row_statistics
from common.tuning import autotune, shared_memory_pruner

LOG2E = tl.constexpr(1.4426950408889634)  # log2(e): exp(x) == exp2(x * LOG2E)

# The interpreter runs every program one after the other on the CPU: one fixed, small config.
# BLOCK_M is a multiple of BLOCK_N (the causal diagonal stage relies on it), as in every GPU config.
INTERPRET_BLOCK_M = 64
INTERPRET_BLOCK_N = 32


@triton.jit
def _dq_block(
    dq, q, do, lse, delta,  # running sum [BLOCK_M, HEAD_DIM] and this program's resident rows
    k_base, v_base,  # this (batch, head)'s K and V
    stride_kn, stride_kd, stride_vn, stride_vd,
    start_n, offs_m, offs_d,  # first key of the block; query indices [BLOCK_M]; [HEAD_DIM]
    N, qk_scale,
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr,  # False: every key of the block is visible to every row: no mask at all
    CAUSAL: tl.constexpr,  # with MASKED: also hide keys j > i
):
    """Add key block [start_n, start_n + BLOCK_N) into dq and return it. lse is in base-2 units.

      1. load K_j and V_j [BLOCK_N, HEAD_DIM], rows >= N as 0;
      2. p = exp2((Q_i K_j^T) * qk_scale - lse)   [BLOCK_M, BLOCK_N], fp32;
      3. if MASKED: p = 0 for keys j >= N and (if CAUSAL) keys j > i. The ragged tail matters
         here: a padded key has score 0, and exp2(0 - lse) can be huge when a row's scores are
         all very negative, which would turn dS into inf and dQ into NaN;
      4. dp = dO_i V_j^T; ds = p * (dp - delta); dq += ds @ K_j (ds cast to K's dtype).
    sm_scale for dQ is applied once, by the caller, after the last block.
    """
    # TODO: your code here (the lesson, README.md, says what to do)
    tl.static_assert(False, "not implemented yet: _dq_block")
    return dq


@triton.jit
def _attn_bwd_dq(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr,
    stride_qb, stride_qh, stride_qn, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_dob, stride_doh, stride_don, stride_dod,
    stride_dqb, stride_dqh, stride_dqn, stride_dqd,
    H, N, sm_scale,
    HEAD_DIM: tl.constexpr,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """One program: dQ for query rows [pid * BLOCK_M, (pid + 1) * BLOCK_M) of one (batch, head).

    Grid: (cdiv(N, BLOCK_M), B * H); program_id(0) is the query block, program_id(1) = b * H + h.
    lse and delta are contiguous [B, H, N]. BLOCK_M is a multiple of BLOCK_N.

      1. offsets of this (batch, head) in 64-bit; load Q_i and dO_i (rows >= N as 0), lse_i
         (times log2(e), for exp2) and delta_i (rows >= N as 0);
      2. dq = 0 (fp32, [BLOCK_M, HEAD_DIM]);
      3. visit the key blocks with _dq_block in two stages:
           non-causal: the full key blocks [0, N // BLOCK_N * BLOCK_N) unmasked, then the ragged
                       tail [.., N) masked;
           causal:     the blocks left of the diagonal [0, start_m) unmasked (start_m = pid *
                       BLOCK_M), then the diagonal [start_m, start_m + BLOCK_M) masked; blocks
                       right of the diagonal are skipped (no query of this block sees them);
      4. dq *= sm_scale; store it in dq's dtype, rows < N only.
    """
    # TODO: your code here (the lesson, README.md, says what to do)
    tl.static_assert(False, "not implemented yet: _attn_bwd_dq")


# ----------------------------------------------------------------------------- GPU autotuning
_prune_configs = shared_memory_pruner("BLOCK_M", "BLOCK_N", n_resident=2, n_streamed=2)  # Q, dO stay; K, V stream


_GPU_CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
    for bm, bn, w, s in [
        (64, 64, 4, 3),
        (64, 32, 4, 4),
        (128, 32, 8, 3),
        (128, 64, 8, 2),
        (128, 64, 8, 3),
        (128, 64, 8, 4),
        (128, 128, 8, 2),
    ]
]

_attn_bwd_dq_tuned = autotune(_GPU_CONFIGS, key=["N", "HEAD_DIM", "CAUSAL"], prune=_prune_configs)(_attn_bwd_dq)


# ----------------------------------------------------------------------------- host wrapper
def attention_backward_dq(q, k, v, do, lse, delta, causal=False, sm_scale=None):
    """dq [B, H, N, d] in q's dtype, for q, k, v, do [B, H, N, d] with any strides.

    lse: float32 [B, H, N], natural-log log-sum-exp of the scaled scores (exercise 04's output);
    delta: float32 [B, H, N], rowsum(dO * O) (exercise 05's output).
    """
    check_attention_tensors(q=q, k=k, v=v, do=do)
    check_row_statistics(q, lse=lse, delta=delta)
    B, H, N, d = q.shape
    sm_scale = attention_scale(d, sm_scale)
    lse, delta = lse.contiguous(), delta.contiguous()

    dq = torch.empty((B, H, N, d), dtype=q.dtype, device=q.device)
    if B * H * N == 0:
        return dq

    args = (
        q, k, v, do, lse, delta, dq,
        *q.stride(), *k.stride(), *v.stride(), *do.stride(), *dq.stride(),
        H, N, sm_scale,
    )
    if interpreting():
        grid = (triton.cdiv(N, INTERPRET_BLOCK_M), B * H)
        _attn_bwd_dq[grid](*args, HEAD_DIM=d, CAUSAL=causal,
                           BLOCK_M=INTERPRET_BLOCK_M, BLOCK_N=INTERPRET_BLOCK_N)
    else:
        grid = lambda meta: (triton.cdiv(N, meta["BLOCK_M"]), B * H)  # noqa: E731
        _attn_bwd_dq_tuned[grid](*args, HEAD_DIM=d, CAUSAL=causal)
    return dq


# ----------------------------------------------------------------------------- autograd
@functools.cache
def _exercise(folder: str, module: str):
    """Your module `folder/module.py` from the course folder next to this one (imported once)."""
    return load_sibling(__file__, folder, module)


class FlashAttention(torch.autograd.Function):
    """o = softmax(q k^T * sm_scale [causal]) v, differentiable with respect to q, k and v."""

    @staticmethod
    def forward(ctx, q, k, v, causal, sm_scale):
        """Run exercise 04; keep what the backward needs (q, k, v, o, lse: O(N) extra, not O(N^2))."""
        # TODO: your code here (the lesson, README.md, says what to do)
        raise NotImplementedError("not implemented yet: forward")

    @staticmethod
    def backward(ctx, do):
        """delta (exercise 05), then dK, dV (exercise 06) and dQ (this file); None for causal, sm_scale."""
        # TODO: your code here (the lesson, README.md, says what to do)
        raise NotImplementedError("not implemented yet: backward")


def flash_attention(q, k, v, causal=False, sm_scale=None):
    """Differentiable FlashAttention: o [B, H, N, d] for q, k, v [B, H, N, d] (fp16, bf16; fp32 in the interpreter)."""
    return FlashAttention.apply(q, k, v, causal, sm_scale)


if __name__ == "__main__":  # `python backward_dq.py`: a quick test on small inputs (a CPU uses the interpreter)
    from common import selftest

    selftest.main()
