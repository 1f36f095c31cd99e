"""Bad arguments to the attention wrappers get a ValueError naming what was wrong."""

import re

import pytest
import torch

from common.shapes import attention_scale, check_attention_tensors, check_row_statistics

q = torch.zeros(2, 3, 17, 64, dtype=torch.float16)


@pytest.mark.parametrize(
    "tensors,message",
    [
        ({"q": q, "k": q[:, :, :5]}, "q, k must all be [B, H, N, d] of one shape; got (2, 3, 17, 64), (2, 3, 5, 64)"),
        ({"q": q[0], "k": q[0]}, "must all be [B, H, N, d]"),
        ({"q": q, "k": q.float()}, "must share one dtype among fp16, bf16, fp32; got torch.float16, torch.float32"),
        ({"o": q.double(), "do": q.double()}, "must share one dtype"),
        ({"q": torch.zeros(1, 1, 4, 48)}, "head dim d must be one of (16, 32, 64, 128); got 48"),
    ],
)
def test_attention_tensors(tensors, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        check_attention_tensors(**tensors)


def test_row_statistics():
    check_row_statistics(q, lse=torch.zeros(2, 3, 17))
    with pytest.raises(ValueError, match=r"delta must be float32 \[B, H, N\] = \(2, 3, 17\); got torch.float16"):
        check_row_statistics(q, lse=torch.zeros(2, 3, 17), delta=torch.zeros(2, 3, 17, dtype=torch.float16))


def test_attention_scale():
    assert attention_scale(64) == 0.125
    assert attention_scale(64, 0.3) == 0.3
    for bad in (0, -0.5, float("nan"), float("inf")):
        with pytest.raises(
            ValueError, match=re.escape(f"sm_scale must be a positive finite number or None; got {bad!r}")
        ):
            attention_scale(64, bad)
