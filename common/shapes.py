"""Argument checks for the attention exercises' host wrappers: a wrong call gets a ValueError
that names the argument and what was expected."""

import math

import torch

HEAD_DIMS = (16, 32, 64, 128)
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def attention_scale(d: int, sm_scale=None) -> float:
    """The factor applied to the scores q @ k^T: sm_scale, or 1/sqrt(d) when it is None."""
    if sm_scale is None:
        return 1.0 / math.sqrt(d)
    scale = float(sm_scale)
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"sm_scale must be a positive finite number or None; got {sm_scale!r}")
    return scale


def check_attention_tensors(**tensors) -> None:
    """Each tensor is [B, H, N, d], all of one shape and one dtype (fp16, bf16 or fp32), d in HEAD_DIMS.

    Called on every launch, so the messages are only built when something is wrong."""
    values = tuple(tensors.values())
    first = values[0]
    if any(t.dim() != 4 or t.shape != first.shape for t in values):
        raise ValueError(
            f"{', '.join(tensors)} must all be [B, H, N, d] of one shape; got {', '.join(str(tuple(t.shape)) for t in values)}"
        )
    if any(t.dtype != first.dtype for t in values) or first.dtype not in DTYPES:
        raise ValueError(
            f"{', '.join(tensors)} must share one dtype among fp16, bf16, fp32; got {', '.join(str(t.dtype) for t in values)}"
        )
    if first.shape[-1] not in HEAD_DIMS:
        raise ValueError(f"head dim d must be one of {HEAD_DIMS}; got {first.shape[-1]}")


def check_row_statistics(q, **stats) -> None:
    """Each of stats (lse, delta) is float32 [B, H, N] for q [B, H, N, d]."""
    for name, t in stats.items():
        if t.shape != q.shape[:3] or t.dtype != torch.float32:
            raise ValueError(f"{name} must be float32 [B, H, N] = {tuple(q.shape[:3])}; got {t.dtype} {tuple(t.shape)}")
