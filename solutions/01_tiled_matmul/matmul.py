"""Exercise 01: a tiled matrix multiplication in Triton.

Each program computes one BLOCK_M x BLOCK_N tile of c = a @ b. It walks along K in BLOCK_K
steps, loading one tile of a and one tile of b per step and accumulating their product in float32.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """c[rows, cols] = sum over k of a[rows, k] * b[k, cols] for this program's output tile.

    1. Find this program's tile: rows = pid_m * BLOCK_M + [0, BLOCK_M), cols likewise.
    2. Start a float32 accumulator of zeros, BLOCK_M x BLOCK_N.
    3. For each k0 in 0, BLOCK_K, 2*BLOCK_K, ... < K: load a[rows, k0:k0+BLOCK_K] and
       b[k0:k0+BLOCK_K, cols], masking everything past M, N or K to 0, and add tl.dot of the two.
    4. Store the accumulator (cast to c's dtype) where rows < M and cols < N.
    Address element (i, j) of a as a_ptr + i * stride_am + j * stride_ak: never assume contiguity.
    """
    ### BEGIN SOLUTION
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + ks
        # Out-of-range elements load as 0, so they add nothing to the dot product.
        a = tl.load(a_ptr + rows[:, None] * stride_am + k[None, :] * stride_ak,
                    mask=(rows[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(b_ptr + k[:, None] * stride_bk + cols[None, :] * stride_bn,
                    mask=(k[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc += tl.dot(a, b)

    c = acc.to(c_ptr.dtype.element_ty)
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, c,
             mask=(rows[:, None] < M) & (cols[None, :] < N))
    ### END SOLUTION


def matmul(a: torch.Tensor, b: torch.Tensor, block_m=64, block_n=64, block_k=32) -> torch.Tensor:
    """a [M, K] @ b [K, N] -> c [M, N] in a's dtype (fp16 or fp32), for any strides."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul needs a [M, K] and b [K, N], got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.dtype != b.dtype:
        raise ValueError(f"a and b must share a dtype, got {a.dtype} and {b.dtype}")
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))
    matmul_kernel[grid](
        a, b, c, M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
    )
    return c


if __name__ == "__main__":  # `python matmul.py`: a quick test on small inputs (a CPU uses the interpreter)
    from common import selftest

    selftest.main()
