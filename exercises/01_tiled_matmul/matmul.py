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
    # TODO: your code here (the lesson, README.md, says what to do)
    tl.static_assert(False, "not implemented yet: matmul_kernel")


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
