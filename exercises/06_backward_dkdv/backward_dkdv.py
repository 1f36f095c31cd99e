"""Exercise 06: dK and dV, the key-side half of the FlashAttention backward pass.

    dk, dv = attention_backward_dkdv(q, k, v, do, lse, delta, causal=False, sm_scale=None)

One program owns one block of BLOCK_N keys of one (batch, head). It keeps K_j and V_j on chip and
streams the query blocks Q_i, dO_i past them, rebuilding the probabilities P_ij from the forward's
lse instead of reading them from memory:

    P_ij  = exp(Q_i K_j^T * sm_scale - lse_i)
    dV_j += P_ij^T dO_i
    dP_ij = dO_i V_j^T
    dS_ij = P_ij * (dP_ij - delta_i)
    dK_j += sm_scale * dS_ij^T Q_i

dK_j and dV_j are sums over query blocks only, so the program that owns key block j writes them once,
with no other program touching them: no atomics.

Conventions (shared with exercises 04, 05 and 07): lse is the natural-log log-sum-exp of each row of
the scaled scores, float32 [B, H, N]; delta = rowsum(dO * O), float32 [B, H, N]; sm_scale defaults
to 1/sqrt(d); causal: query i sees keys j <= i.
"""

import torch
import triton
import triton.language as tl

from common.env import interpreting
from common.shapes import attention_scale, check_attention_tensors, check_row_statistics
from common.tuning import autotune, shared_memory_pruner

LOG2E = tl.constexpr(1.4426950408889634)  # log2(e): exp(x) == exp2(x * LOG2E)

# The interpreter runs every program one after the other on the CPU: one fixed, small config.
# BLOCK_N is a multiple of BLOCK_M (the causal diagonal stage relies on it), as in every GPU config.
INTERPRET_BLOCK_M = 32
INTERPRET_BLOCK_N = 64


@triton.jit
def _dkdv_block(
    dk, dv, k, v,  # running sums and the resident K_j, V_j tiles [BLOCK_N, HEAD_DIM]
    q_base, do_base, lse_base, delta_base,  # this (batch, head)'s Q, dO, lse, delta
    stride_qn, stride_qd, stride_don, stride_dod,
    start_m, offs_n, offs_d,  # first query row of the block; key indices [BLOCK_N]; [HEAD_DIM]
    N, qk_scale,
    BLOCK_M: tl.constexpr,
    MASKED: tl.constexpr,  # True on the diagonal: hide query rows i < key j
):
    """Add query block [start_m, start_m + BLOCK_M) into (dk, dv) and return them.

    Work in the transposed orientation (keys as rows) so that no P tile is ever transposed:
      1. load Q_i and dO_i [BLOCK_M, HEAD_DIM] (rows >= N as 0), lse_i (times log2(e), for
         exp2) and delta_i [BLOCK_M] (rows >= N as 0: with dO_i = 0 such rows add exactly nothing
         to dV or dS);
      2. p^T = exp2((K_j Q_i^T) * qk_scale - lse_i)   [BLOCK_N, BLOCK_M], fp32;
         qk_scale = sm_scale * log2(e), so this is exp(scaled score - natural-log lse);
      3. if MASKED: p^T = 0 where query i < key j;
      4. dv += p^T @ dO_i (p^T cast to dO's dtype, fp32 accumulation);
      5. dp^T = V_j dO_i^T; ds^T = p^T * (dp^T - delta_i); dk += ds^T @ Q_i (ds^T cast to Q's dtype).
    sm_scale for dK is applied once, by the caller, after the last block.
    """
    # TODO: your code here (the lesson, README.md, says what to do)
    tl.static_assert(False, "not implemented yet: _dkdv_block")
    return dk, dv


@triton.jit
def _attn_bwd_dkdv(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr,
    stride_qb, stride_qh, stride_qn, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_dob, stride_doh, stride_don, stride_dod,
    stride_dkb, stride_dkh, stride_dkn, stride_dkd,
    stride_dvb, stride_dvh, stride_dvn, stride_dvd,
    H, N, sm_scale,
    HEAD_DIM: tl.constexpr,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """One program: dK and dV for keys [pid * BLOCK_N, (pid + 1) * BLOCK_N) of one (batch, head).

    Grid: (cdiv(N, BLOCK_N), B * H); program_id(0) is the key block, program_id(1) = b * H + h.
    lse and delta are contiguous [B, H, N]. BLOCK_N is a multiple of BLOCK_M.

      1. offsets of this (batch, head) in 64-bit; load K_j and V_j once (rows >= N as 0);
      2. dk = dv = 0 (fp32, [BLOCK_N, HEAD_DIM]);
      3. visit the query blocks with _dkdv_block:
           non-causal: every query block [0, N), unmasked (the ragged last one needs no score
                       mask: its padded rows load as zeros);
           causal:     query blocks above start_n = pid * BLOCK_N see none of these keys: skip
                       them; [start_n, start_n + BLOCK_N) crosses the diagonal: masked; from
                       start_n + BLOCK_N to N every query sees every key of the block: unmasked;
      4. dk *= sm_scale; store dk and dv in the output dtype, rows < N only.
    """
    # TODO: your code here (the lesson, README.md, says what to do)
    tl.static_assert(False, "not implemented yet: _attn_bwd_dkdv")


# ----------------------------------------------------------------------------- GPU autotuning
_prune_configs = shared_memory_pruner("BLOCK_N", "BLOCK_M", n_resident=2, n_streamed=2)  # K, V stay; Q, dO stream


_GPU_CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
    for bm, bn, w, s in [
        (32, 64, 4, 3),
        (32, 64, 4, 4),
        (32, 128, 4, 3),
        (32, 128, 4, 4),
        (32, 128, 4, 6),
        (64, 64, 4, 3),
        (64, 128, 4, 3),
        (64, 128, 8, 3),
        (64, 128, 8, 4),
    ]
]

_attn_bwd_dkdv_tuned = autotune(_GPU_CONFIGS, key=["N", "HEAD_DIM", "CAUSAL"], prune=_prune_configs)(_attn_bwd_dkdv)


# ----------------------------------------------------------------------------- host wrapper
def attention_backward_dkdv(q, k, v, do, lse, delta, causal=False, sm_scale=None):
    """(dk, dv), each [B, H, N, d] in q's dtype, for q, k, v, do [B, H, N, d] with any strides.

    lse: float32 [B, H, N], natural-log log-sum-exp of the scaled scores (exercise 04's output);
    delta: float32 [B, H, N], rowsum(dO * O) (exercise 05's output).
    """
    check_attention_tensors(q=q, k=k, v=v, do=do)
    check_row_statistics(q, lse=lse, delta=delta)
    B, H, N, d = q.shape
    sm_scale = attention_scale(d, sm_scale)
    lse, delta = lse.contiguous(), delta.contiguous()

    dk = torch.empty((B, H, N, d), dtype=q.dtype, device=q.device)
    dv = torch.empty((B, H, N, d), dtype=q.dtype, device=q.device)
    if B * H * N == 0:
        return dk, dv

    args = (
        q, k, v, do, lse, delta, dk, dv,
        *q.stride(), *k.stride(), *v.stride(), *do.stride(), *dk.stride(), *dv.stride(),
        H, N, sm_scale,
    )
    if interpreting():
        grid = (triton.cdiv(N, INTERPRET_BLOCK_N), B * H)
        _attn_bwd_dkdv[grid](*args, HEAD_DIM=d, CAUSAL=causal,
                             BLOCK_M=INTERPRET_BLOCK_M, BLOCK_N=INTERPRET_BLOCK_N)
    else:
        grid = lambda meta: (triton.cdiv(N, meta["BLOCK_N"]), B * H)  # noqa: E731
        _attn_bwd_dkdv_tuned[grid](*args, HEAD_DIM=d, CAUSAL=causal)
    return dk, dv


if __name__ == "__main__":  # `python backward_dkdv.py`: a quick test on small inputs (a CPU uses the interpreter)
    from common import selftest

    selftest.main()
