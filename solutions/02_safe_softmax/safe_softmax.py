"""Exercise 02: a numerically safe row-wise softmax in Triton.

Each program owns one row and makes three passes over it, one column block at a time:
the row max, then the sum of exponentials shifted by that max, then the normalised output.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(
    x_ptr, y_ptr,
    n_cols,
    stride_xr, stride_xc,
    stride_yr, stride_yc,
    BLOCK: tl.constexpr,
):
    """y[row] = exp(x[row] - max(x[row])) / sum(exp(x[row] - max(x[row]))) for this program's row.

    Pass 1: m = the row max, over blocks of BLOCK columns (masked columns read as -inf).
    Pass 2: l = sum of exp(x - m) over the same blocks.
    Pass 3: store exp(x - m) / l, block by block, cast to y's dtype.
    Compute in float32 whatever the input dtype. A row that is entirely -inf has no finite entry
    and must give zeros, not NaN: exp(-inf - (-inf)) is NaN, so shift by 0 when m is -inf, and
    divide by 1 when l is 0.
    """
    ### BEGIN SOLUTION
    row = tl.program_id(0)
    x_row = x_ptr + row.to(tl.int64) * stride_xr
    y_row = y_ptr + row.to(tl.int64) * stride_yr
    cols = tl.arange(0, BLOCK)

    m = tl.full([BLOCK], float("-inf"), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        c = start + cols
        x = tl.load(x_row + c * stride_xc, mask=c < n_cols, other=float("-inf")).to(tl.float32)
        m = tl.maximum(m, x)
    m_row = tl.max(m, axis=0)
    m_row = tl.where(m_row == float("-inf"), 0.0, m_row)  # all -inf: any finite shift works

    l = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        c = start + cols
        x = tl.load(x_row + c * stride_xc, mask=c < n_cols, other=float("-inf")).to(tl.float32)
        l += tl.exp(x - m_row)
    l_row = tl.sum(l, axis=0)
    l_row = tl.where(l_row == 0.0, 1.0, l_row)  # all -inf: every exp is 0, keep it 0

    for start in range(0, n_cols, BLOCK):
        c = start + cols
        x = tl.load(x_row + c * stride_xc, mask=c < n_cols, other=float("-inf")).to(tl.float32)
        y = tl.exp(x - m_row) / l_row
        tl.store(y_row + c * stride_yc, y.to(y_ptr.dtype.element_ty), mask=c < n_cols)
    ### END SOLUTION


def softmax(x: torch.Tensor, block: int = 128) -> torch.Tensor:
    """Row-wise softmax of a 2-D tensor (fp16 or fp32, any strides); all -inf rows give zeros."""
    if x.dim() != 2:
        raise ValueError(f"softmax needs a 2-D tensor [rows, cols], got shape {tuple(x.shape)}")
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    softmax_kernel[(x.shape[0],)](
        x, y, x.shape[1], x.stride(0), x.stride(1), y.stride(0), y.stride(1), BLOCK=block,
    )
    return y


if __name__ == "__main__":  # `python safe_softmax.py`: a quick test on small inputs (a CPU uses the interpreter)
    from common import selftest

    selftest.main()
