"""Input generators: fresh, seeded random data. Never zeros: zeros hide unwritten outputs."""

import zlib

import torch


def generator(seed: int, tag: str) -> torch.Generator:
    """A generator seeded by the run's seed and a tag, so each case is reproducible on its own."""
    return torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(tag.encode()))


def randn(shape, dtype, device, gen: torch.Generator, scale: float = 1.0):
    """Standard normal data (times `scale`), drawn on the CPU for reproducibility across devices."""
    x = torch.randn(shape, generator=gen, dtype=torch.float32) * scale
    return x.to(dtype=dtype, device=device)


def strided_view(x: torch.Tensor) -> torch.Tensor:
    """The same values as `x` [B, H, N, d], stored as [B, N, H, d] and viewed without a copy."""
    return x.transpose(1, 2).contiguous().transpose(1, 2)
