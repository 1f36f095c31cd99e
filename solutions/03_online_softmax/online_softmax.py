"""Exercise 03: online softmax in Triton, returning the row log-sum-exp too.

Pass 1 reads each column block once and keeps two running numbers per row: the max m seen so far
and the denominator l, kept relative to that max. When the max grows, the old l is rescaled.
Pass 2 writes the normalised output. lse = m + log(l) is what FlashAttention stores.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def online_softmax_kernel(
    x_ptr, y_ptr, lse_ptr,
    n_cols,
    stride_xr, stride_xc,
    stride_yr, stride_yc,
    BLOCK: tl.constexpr,
):
    """y[row] = softmax(x[row]) and lse[row] = log(sum(exp(x[row]))) (natural log), in two passes.

    Pass 1, for each block of columns (masked columns read as -inf):
        m_new = max(m, max(x_block))
        l     = l * exp(m - m_new) + sum(exp(x_block - m_new))
        m     = m_new
    Pass 2: store exp(x - m) / l, block by block, cast to y's dtype; store lse = m + log(l).
    Start from m = -inf, l = 0. Guard the all -inf row (no finite entry): y must be 0 and lse -inf,
    never NaN (exp(-inf - (-inf)) is NaN).
    """
    ### BEGIN SOLUTION
    row = tl.program_id(0)
    x_row = x_ptr + row.to(tl.int64) * stride_xr
    y_row = y_ptr + row.to(tl.int64) * stride_yr
    cols = tl.arange(0, BLOCK)

    m = float("-inf")
    l = 0.0
    for start in range(0, n_cols, BLOCK):
        c = start + cols
        x = tl.load(x_row + c * stride_xc, mask=c < n_cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        m_shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # nothing finite seen yet
        l = l * tl.exp(m - m_shift) + tl.sum(tl.exp(x - m_shift), axis=0)
        m = m_new

    # An all -inf row ends with m = -inf and l = 0: its outputs are exp(-inf) / 1 = 0, lse = -inf.
    m_shift = tl.where(m == float("-inf"), 0.0, m)
    l_safe = tl.where(l == 0.0, 1.0, l)
    for start in range(0, n_cols, BLOCK):
        c = start + cols
        x = tl.load(x_row + c * stride_xc, mask=c < n_cols, other=float("-inf")).to(tl.float32)
        y = tl.exp(x - m_shift) / l_safe
        tl.store(y_row + c * stride_yc, y.to(y_ptr.dtype.element_ty), mask=c < n_cols)
    tl.store(lse_ptr + row, tl.where(l == 0.0, float("-inf"), m_shift + tl.log(l_safe)))
    ### END SOLUTION


def online_softmax(x: torch.Tensor, block: int = 128):
    """(softmax(x), lse) row-wise for a 2-D tensor; lse is float32 [rows], natural log."""
    if x.dim() != 2:
        raise ValueError(f"online_softmax needs a 2-D tensor [rows, cols], got shape {tuple(x.shape)}")
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    lse = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    online_softmax_kernel[(x.shape[0],)](
        x, y, lse, x.shape[1], x.stride(0), x.stride(1), y.stride(0), y.stride(1), BLOCK=block,
    )
    return y, lse


if __name__ == "__main__":  # `python online_softmax.py`: a quick test on small inputs (a CPU uses the interpreter)
    from common import selftest

    selftest.main()
