"""The references themselves: conventions other code relies on."""

import math

import torch

from common import reference


def test_tf32_emulation_keeps_ten_mantissa_bits_and_is_less_precise_than_fp32():
    x = torch.tensor([1.0, 1 + 2**-11, 1 + 2**-10, -math.pi])
    assert reference._truncate_to_tf32(x).tolist() == [1.0, 1.0, 1 + 2**-10, -3.140625]
    a, b = torch.randn(128, 128), torch.randn(128, 128)
    exact = reference.matmul(a, b)
    tf32_error = (reference.matmul_tf32(a, b).double() - exact).abs().max()
    fp32_error = ((a @ b).double() - exact).abs().max()
    assert 1e-3 < tf32_error < 0.2 and tf32_error > 100 * fp32_error


def test_all_neg_inf_row_gives_zeros_and_neg_inf_lse():
    x = torch.tensor([[0.0, 1.0], [-math.inf, -math.inf]])
    y, lse = reference.online_softmax(x)
    assert torch.equal(y[1], torch.zeros(2, dtype=torch.float64)) and lse[1] == -math.inf
    assert torch.allclose(y[0].sum(), torch.tensor(1.0, dtype=torch.float64))


def test_attention_lse_is_natural_log_of_scaled_scores():
    q, k, v = (torch.randn(1, 2, 5, 16) for _ in range(3))
    o, lse = reference.attention(q, k, v, causal=True, sm_scale=0.3)
    s = (q.double() @ k.double().transpose(-1, -2)) * 0.3
    assert torch.allclose(lse[..., 0], s[..., 0, 0])  # causal: row 0 sees key 0 only
    assert torch.allclose(lse[..., -1], torch.logsumexp(s[..., -1, :], -1))
    assert torch.allclose(o[..., 0, :], v[..., 0, :].double())
