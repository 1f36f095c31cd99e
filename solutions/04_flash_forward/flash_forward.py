"""Exercise 04: the FlashAttention forward pass in Triton.

    o, lse = flash_attention_forward(q, k, v, causal=False, sm_scale=None)

q, k, v are [B, H, N, d] with any strides. One program computes one block of BLOCK_M query rows of
one (batch, head): it keeps that Q block on chip, streams K and V through in blocks of BLOCK_N keys,
and folds each block into the running softmax statistics (m_i, l_i) and the fp32 accumulator acc
(online softmax). Nothing of size N x N is ever written to memory.

Conventions (shared with exercises 06 and 07, which consume lse):
  - scores s = (q @ k^T) * sm_scale, sm_scale defaults to 1/sqrt(d);
  - causal: query i sees keys j <= i;
  - lse[b, h, i] = natural-log log-sum-exp of row i of s, float32 [B, H, N].
"""

import torch
import triton
import triton.language as tl

from common import env
from common.shapes import attention_scale, check_attention_tensors
from common.tuning import autotune, shared_memory_pruner

LOG2E = tl.constexpr(1.4426950408889634)  # log2(e): exp(x) == exp2(x * LOG2E)

# The interpreter runs every program one after the other on the CPU: one fixed, small config.
# BLOCK_M is a multiple of BLOCK_N (the causal diagonal stage relies on it), as in every GPU config.
INTERPRET_BLOCK_M = 64
INTERPRET_BLOCK_N = 32


@triton.jit
def _attn_fwd_inner(
    acc, l_i, m_i, q,  # running state of this query block, and the Q block itself
    k_base, v_base,  # K and V of this (batch, head)
    stride_kn, stride_kd, stride_vn, stride_vd,
    offs_m, offs_d,  # query row indices [BLOCK_M], head-dim indices [HEAD_DIM]
    lo, hi,  # the key range [lo, hi) this call visits, lo a multiple of BLOCK_N
    N, qk_scale,
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr,  # False: every key of [lo, hi) is visible to every row: no mask at all
    CAUSAL: tl.constexpr,  # with MASKED: also hide keys j > i
):
    """Fold the key blocks of [lo, hi) into (acc, l_i, m_i) and return the new state.

    m_i is kept in base-2 units: the scaled score s = qk * sm_scale becomes qk * qk_scale with
    qk_scale = sm_scale * log2(e), and exp(s - m) == exp2(qk * qk_scale - m * log2(e)). For each key block:
      1. load K^T [HEAD_DIM, BLOCK_N] and compute qk = q @ K^T [BLOCK_M, BLOCK_N] in fp32;
      2. if MASKED: set to -inf the keys j >= N and (if CAUSAL) the keys j > i;
      3. m_new = max(m_i, row max of qk * qk_scale); p = exp2(qk * qk_scale - m_new) (sm_scale > 0,
         so scaling does not change which score is the largest);
      4. alpha = exp2(m_i - m_new) rescales what was summed under the old maximum:
         l_i = l_i * alpha + row sum of p;  acc = acc * alpha + p @ V  (p cast to V's dtype);
      5. m_i = m_new.
    """
    ### BEGIN SOLUTION
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        keys = start_n + offs_n
        kt_ptrs = k_base + offs_d[:, None] * stride_kd + keys[None, :] * stride_kn
        v_ptrs = v_base + keys[:, None] * stride_vn + offs_d[None, :] * stride_vd
        if MASKED:
            kt = tl.load(kt_ptrs, mask=keys[None, :] < N, other=0.0)
            v = tl.load(v_ptrs, mask=keys[:, None] < N, other=0.0)
        else:
            kt = tl.load(kt_ptrs)
            v = tl.load(v_ptrs)

        qk = tl.dot(q, kt)
        if MASKED:
            visible = keys[None, :] < N
            if CAUSAL:
                visible = visible & (keys[None, :] <= offs_m[:, None])
            qk = tl.where(visible, qk, float("-inf"))

        # Every row has seen a visible key before it meets a fully hidden block (see the kernel),
        # so m_new is finite and the exponent never computes -inf - (-inf).
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        # Scale and subtract in one fused multiply-add per score: the softmax is the inner loop's
        # bottleneck next to the two dots, so every instruction saved there shows.
        p = tl.math.exp2(qk * qk_scale - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    ### END SOLUTION
    return acc, l_i, m_i


@triton.jit
def _attn_fwd(
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr,
    stride_qb, stride_qh, stride_qn, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_on, stride_od,
    H, N, sm_scale,
    HEAD_DIM: tl.constexpr,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """One program: query rows [start_m * BLOCK_M, (start_m + 1) * BLOCK_M) of one (batch, head).

    Grid: (cdiv(N, BLOCK_M), B * H); program_id(0) is the query block, program_id(1) = b * H + h.
    lse is contiguous [B, H, N]. BLOCK_M is a multiple of BLOCK_N.

      1. offsets of this (batch, head) in 64-bit; load the Q block (rows >= N masked to 0);
      2. m_i = -inf, l_i = 0, acc = 0 (fp32); qk_scale = sm_scale * log2(e) (exp2 is the fast one);
      3. visit the key blocks with _attn_fwd_inner in two stages:
           non-causal: the full key blocks [0, N // BLOCK_N * BLOCK_N) unmasked, then the ragged
                       tail [.., N) masked;
           causal:     the blocks left of the diagonal [0, start_m * BLOCK_M) unmasked, then the
                       diagonal [start_m * BLOCK_M, min((start_m + 1) * BLOCK_M, N)) masked;
                       blocks right of the diagonal are skipped (fully hidden);
      4. o = acc / l_i, stored in o's dtype; lse = (m_i + log2(l_i)) / log2(e), back to natural
         log; store rows < N only.
    """
    ### BEGIN SOLUTION
    start_m = tl.program_id(0)
    off_bh = tl.program_id(1)
    off_b = (off_bh // H).to(tl.int64)
    off_h = (off_bh % H).to(tl.int64)
    q_base = q_ptr + off_b * stride_qb + off_h * stride_qh
    k_base = k_ptr + off_b * stride_kb + off_h * stride_kh
    v_base = v_ptr + off_b * stride_vb + off_h * stride_vh
    o_base = o_ptr + off_b * stride_ob + off_h * stride_oh

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m[:, None] < N
    q = tl.load(q_base + offs_m[:, None] * stride_qn + offs_d[None, :] * stride_qd, mask=row_ok, other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * LOG2E

    if CAUSAL:
        # Keys left of the diagonal are all <= every row of this block, and all < N.
        split = start_m * BLOCK_M
        end = tl.minimum((start_m + 1) * BLOCK_M, N)
    else:
        split = (N // BLOCK_N) * BLOCK_N
        end = N
    acc, l_i, m_i = _attn_fwd_inner(
        acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
        offs_m, offs_d, 0, split, N, qk_scale, BLOCK_N, False, CAUSAL,
    )
    # Masked stage. Causal: each row meets its own key (j = i) in the first diagonal block that
    # can hide anything from it, so no row is ever fully hidden when it enters a block.
    acc, l_i, m_i = _attn_fwd_inner(
        acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
        offs_m, offs_d, split, end, N, qk_scale, BLOCK_N, True, CAUSAL,
    )

    o = acc / l_i[:, None]
    lse = (m_i + tl.math.log2(l_i)) / LOG2E  # base-2 units back to natural log
    tl.store(o_base + offs_m[:, None] * stride_on + offs_d[None, :] * stride_od,
             o.to(o_ptr.dtype.element_ty), mask=row_ok)
    tl.store(lse_ptr + off_bh.to(tl.int64) * N + offs_m, lse, mask=offs_m < N)
    ### END SOLUTION


# ----------------------------------------------------------------------------- GPU autotuning
_fits_shared_memory = shared_memory_pruner("BLOCK_M", "BLOCK_N", n_resident=1, n_streamed=2)  # Q stays; K, V stream


def _prune_configs(configs, named_args, **kwargs):
    """Short sequences (few query blocks) only try BLOCK_M = 64, which also keeps their tuning quick."""
    if named_args["N"] < 512:
        configs = [c for c in configs if c.kwargs["BLOCK_M"] == 64]
    return _fits_shared_memory(configs, named_args, **kwargs)


_GPU_CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
    for bm, bn, w, s in [
        (64, 32, 4, 3),
        (64, 64, 4, 3),
        (128, 32, 4, 3),
        (128, 64, 4, 3),
        (128, 64, 8, 3),
        (128, 64, 4, 4),
        (128, 128, 8, 2),
        (128, 128, 8, 3),
    ]
]

_attn_fwd_tuned = autotune(_GPU_CONFIGS, key=["N", "HEAD_DIM", "CAUSAL"], prune=_prune_configs)(_attn_fwd)


# ----------------------------------------------------------------------------- host wrapper
def flash_attention_forward(q, k, v, causal=False, sm_scale=None):
    """(o, lse): o [B, H, N, d] in q's dtype, lse float32 [B, H, N] (natural log, scaled scores)."""
    check_attention_tensors(q=q, k=k, v=v)
    B, H, N, d = q.shape
    sm_scale = attention_scale(d, sm_scale)

    o = torch.empty((B, H, N, d), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, H, N), dtype=torch.float32, device=q.device)
    if B * H * N == 0:
        return o, lse

    args = (
        q, k, v, o, lse,
        *q.stride(), *k.stride(), *v.stride(), *o.stride(),
        H, N, sm_scale,
    )
    if env.interpreting():
        grid = (triton.cdiv(N, INTERPRET_BLOCK_M), B * H)
        _attn_fwd[grid](*args, HEAD_DIM=d, CAUSAL=causal, BLOCK_M=INTERPRET_BLOCK_M, BLOCK_N=INTERPRET_BLOCK_N)
    else:
        grid = lambda meta: (triton.cdiv(N, meta["BLOCK_M"]), B * H)  # noqa: E731
        _attn_fwd_tuned[grid](*args, HEAD_DIM=d, CAUSAL=causal)
    return o, lse


if __name__ == "__main__":  # `python flash_forward.py`: a quick test on small inputs (a CPU uses the interpreter)
    from common import selftest

    selftest.main()
