"""Exercise 05: the preprocessing step of the FlashAttention backward pass.

    delta = attention_backward_preprocess(o, do)

For every query row i, delta[b, h, i] = sum over the head dimension of dO[b, h, i, :] * O[b, h, i, :],
in float32. The two main backward kernels (exercises 06 and 07) need this one number per row inside
their inner loops (dS = P * (dP - delta)); computing it once here, in a cheap pass that reads O and dO
a single time, keeps it out of those loops.
"""

import torch
import triton
import triton.language as tl

from common.env import interpreting
from common.shapes import check_attention_tensors

# Rows per program. The kernel is memory bound (one multiply-add per element loaded), so any
# reasonable tile does; the interpreter just wants few, not too large, programs.
BLOCK_M = 64
INTERPRET_BLOCK_M = 32


@triton.jit
def _attn_bwd_preprocess(
    o_ptr, do_ptr, delta_ptr,
    stride_ob, stride_oh, stride_on, stride_od,
    stride_dob, stride_doh, stride_don, stride_dod,
    H, N,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
):
    """delta for query rows [pid * BLOCK_M, (pid + 1) * BLOCK_M) of one (batch, head).

    Grid: (cdiv(N, BLOCK_M), B * H); program_id(0) is the row block, program_id(1) = b * H + h.
    delta is contiguous float32 [B, H, N], so row i of (batch, head) bh lives at bh * N + i.

      1. offsets of this (batch, head) in 64-bit (B * H * N * d can pass 2**31);
      2. load the [BLOCK_M, HEAD_DIM] tiles of O and dO, rows >= N masked to 0;
      3. multiply them elementwise in float32 and sum each row (axis 1);
      4. store the BLOCK_M sums, rows < N only.
    """
    # TODO: your code here (the lesson, README.md, says what to do)
    tl.static_assert(False, "not implemented yet: _attn_bwd_preprocess")


def attention_backward_preprocess(o: torch.Tensor, do: torch.Tensor) -> torch.Tensor:
    """delta = rowsum(dO * O): float32 [B, H, N] for o, do [B, H, N, d] (fp16, bf16 or fp32, any strides)."""
    check_attention_tensors(o=o, do=do)
    B, H, N, d = o.shape

    delta = torch.empty((B, H, N), dtype=torch.float32, device=o.device)
    if B * H * N == 0:
        return delta
    block_m = INTERPRET_BLOCK_M if interpreting() else BLOCK_M
    grid = (triton.cdiv(N, block_m), B * H)
    _attn_bwd_preprocess[grid](
        o, do, delta,
        *o.stride(), *do.stride(),
        H, N,
        HEAD_DIM=d, BLOCK_M=block_m,
    )
    return delta


if __name__ == "__main__":  # `python backward_preprocess.py`: a quick test on small inputs (a CPU uses the interpreter)
    from common import selftest

    selftest.main()
