"""The tolerance policy.

A kernel may be at most FACTOR times as far from the float64 reference as plain PyTorch doing the
same computation in the same low precision, plus a small floor relative to the largest value of the
output (allowed_error says exactly how). Because the allowance scales with the true values, an
all-zero output never passes.
"""

import torch

FACTOR = 2.0
FLOOR = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}

# The diagnoses, not the scores, use these: they compare a kernel's output on probe inputs with
# what a known bug would give.
WEIGHT_TOL = 0.02  # an attention weight (in [0, 1]) further than this from the expected one is wrong
PROBE_HALFWAY = 0.5  # a probe whose outputs are 0 or 1 (a key seen or not) is read at the halfway mark
SCALE_MATCH = 0.02  # a gradient off by a constant factor matches a known factor within 2%


def max_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    both_finite = torch.isfinite(ref) & torch.isfinite(out)
    return _largest((out.double() - ref.double()).abs()[both_finite])


def _largest(values: torch.Tensor) -> float:
    return float(values.max()) if values.numel() else 0.0


def allowed_error(ref: torch.Tensor, lowp: torch.Tensor, dtype: torch.dtype) -> float:
    """The largest absolute error a kernel computing `ref` from `dtype` inputs may make:

        FACTOR * max |lowp - ref| + FLOOR[dtype] * max |ref|

    (maxima over the elements where both are finite). The floor is relative to the largest value of
    the output itself, whatever its scale: for probabilities of at most 0.05 in fp16 it is 5e-5, not
    1e-3, so a bug that moves every probability by a few percent cannot hide under it. An output whose
    reference is exactly zero everywhere (dK for N = 1: the terms cancel) gets FLOOR[dtype] itself.
    """
    size = _largest(ref[torch.isfinite(ref)].abs()) or 1.0
    return FACTOR * max_error(lowp, ref) + FLOOR[dtype] * size
