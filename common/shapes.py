"""Argument checks for the attention exercises' host wrappers: a wrong call gets a ValueError
that names the argument and what was expected."""

import torch

HEAD_DIMS = (16, 32, 64, 128)
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def check_attention_tensors(**tensors) -> None:
    """Each tensor is [B, H, N, d], all of one shape and one dtype (fp16, bf16 or fp32), d in HEAD_DIMS."""
    names = ", ".join(tensors)
    shapes = ", ".join(str(tuple(t.shape)) for t in tensors.values())
    first = next(iter(tensors.values()))
    if any(t.dim() != 4 for t in tensors.values()) or any(t.shape != first.shape for t in tensors.values()):
        raise ValueError(f"{names} must all be [B, H, N, d] of one shape; got {shapes}")
    dtypes = [t.dtype for t in tensors.values()]
    if any(dt != first.dtype for dt in dtypes) or first.dtype not in DTYPES:
        raise ValueError(f"{names} must share one dtype among fp16, bf16, fp32; got {', '.join(map(str, dtypes))}")
    if first.shape[-1] not in HEAD_DIMS:
        raise ValueError(f"head dim d must be one of {HEAD_DIMS}; got {first.shape[-1]}")


def check_row_statistics(q, **stats) -> None:
    """Each of stats (lse, delta) is float32 [B, H, N] for q [B, H, N, d]."""
    for name, t in stats.items():
        if t.shape != q.shape[:3] or t.dtype != torch.float32:
            raise ValueError(f"{name} must be float32 [B, H, N] = {tuple(q.shape[:3])}; got {t.dtype} {tuple(t.shape)}")
