"""The autotuning pruner, checked on a CPU with the GPU's shared memory size faked."""

import types

import torch
import triton

from common import tuning

CONFIGS = [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=4, num_stages=s)
           for m, n, s in [(64, 32, 3), (64, 64, 3), (128, 64, 3), (128, 128, 3), (32, 64, 3)]]


def prune(monkeypatch, shared_memory, head_dim, dtype=torch.float16):
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: types.SimpleNamespace(shared_memory_per_block_optin=shared_memory))
    pruner = tuning.shared_memory_pruner("BLOCK_M", "BLOCK_N", n_resident=1, n_streamed=2)
    kept = pruner(CONFIGS, {"q_ptr": torch.empty(1, dtype=dtype)}, HEAD_DIM=head_dim)
    return [(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]) for c in kept]


def test_keeps_streamed_blocks_no_larger_than_resident_ones_that_fit(monkeypatch):
    # Hopper-sized shared memory, d=64 fp16: (128, 128) needs (128 + 2*3*128) * 64 * 2 = 114688 bytes.
    assert prune(monkeypatch, 232448, 64) == [(64, 32), (64, 64), (128, 64), (128, 128)]
    # A consumer card (~100 KB): the 128 x 128 tiles no longer fit.
    assert prune(monkeypatch, 101376, 64) == [(64, 32), (64, 64), (128, 64)]


def test_falls_back_to_the_smallest_when_nothing_fits(monkeypatch):
    assert prune(monkeypatch, 1024, 128, torch.float32) == [(64, 32)]
