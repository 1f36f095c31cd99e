"""The autotuning rules, checked on a CPU with the GPU's shared memory size faked: every course
kernel gets configs that fit on an H200, an A100 and a T4, and grading tries one config."""

import types

import pytest
import torch
import triton

from common import tuning
from common.loader import load_module
from grader.runner import ROOT

CONFIGS = [
    triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=4, num_stages=s)
    for m, n, s in [(64, 32, 3), (64, 64, 3), (128, 64, 3), (128, 128, 3), (32, 64, 3)]
]
SHARED_MEMORY = {"H200 (sm90)": 232448, "A100 (sm80)": 166912, "T4 (sm75)": 65536}  # bytes per block, opt-in
KERNELS = {  # kernel: (solution file, resident block, streamed block, tiles resident, tiles streamed)
    "_attn_fwd_tuned": ("04_flash_forward/flash_forward.py", "BLOCK_M", "BLOCK_N", 1, 2),
    "_attn_bwd_dkdv_tuned": ("06_backward_dkdv/backward_dkdv.py", "BLOCK_N", "BLOCK_M", 2, 2),
    "_attn_bwd_dq_tuned": ("07_backward_dq/backward_dq.py", "BLOCK_M", "BLOCK_N", 2, 2),
}


@pytest.fixture
def gpu(monkeypatch):
    def fake(shared_memory):
        monkeypatch.setattr(
            torch.cuda,
            "get_device_properties",
            lambda device: types.SimpleNamespace(shared_memory_per_block_optin=shared_memory),
        )

    return fake


def prune(gpu, shared_memory, head_dim, dtype=torch.float16):
    gpu(shared_memory)
    pruner = tuning.shared_memory_pruner("BLOCK_M", "BLOCK_N", n_resident=1, n_streamed=2)
    kept = pruner(CONFIGS, {"q_ptr": torch.empty(1, dtype=dtype)}, HEAD_DIM=head_dim)
    return [(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_stages) for c in kept]


def test_keeps_streamed_blocks_no_larger_than_resident_ones_that_fit(gpu):
    # Hopper-sized shared memory, d=64 fp16: (128, 128) needs (128 + 2*3*128) * 64 * 2 = 114688 bytes.
    assert prune(gpu, 232448, 64) == [(64, 32, 3), (64, 64, 3), (128, 64, 3), (128, 128, 3)]
    # A consumer card (~100 KB): the 128 x 128 tiles no longer fit.
    assert prune(gpu, 101376, 64) == [(64, 32, 3), (64, 64, 3), (128, 64, 3)]


def test_shrinks_the_smallest_config_when_nothing_fits(gpu):
    # 64 KB, d=128 fp32: (64, 32) with 3 stages needs 131072 bytes, with 1 stage 65536: it fits.
    assert prune(gpu, 65536, 128, torch.float32) == [(64, 32, 1)]
    assert prune(gpu, 1024, 128, torch.float32) == [(16, 16, 1)]  # the least there is


def _bytes(config, head_dim, dtype, resident, streamed, n_resident, n_streamed):
    tiles = n_resident * config.kwargs[resident] + n_streamed * config.num_stages * config.kwargs[streamed]
    return tiles * head_dim * torch.empty((), dtype=dtype).element_size()


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("name", SHARED_MEMORY)
def test_every_course_kernel_has_a_config_that_fits(gpu, kernel, name):
    path, resident, streamed, n_resident, n_streamed = KERNELS[kernel]
    tuner = getattr(load_module(ROOT / "solutions" / path), kernel)
    gpu(SHARED_MEMORY[name])
    for head_dim in (16, 32, 64, 128):
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            for N in (64, 4096):
                args = {"q_ptr": torch.empty(1, dtype=dtype), "N": N}
                kept = tuner.early_config_prune(tuner.configs, args, HEAD_DIM=head_dim)
                shape = f"{name}, d={head_dim}, {dtype}, N={N}"
                assert kept, shape
                for c in kept:
                    need = _bytes(c, head_dim, dtype, resident, streamed, n_resident, n_streamed)
                    assert need <= SHARED_MEMORY[name], f"{shape}: {c} needs {need} bytes"
                    assert c.kwargs[resident] % c.kwargs[streamed] == 0, f"{shape}: {c}"


def test_grading_tries_one_config(gpu, monkeypatch):
    tuner = load_module(ROOT / "solutions" / KERNELS["_attn_fwd_tuned"][0])._attn_fwd_tuned
    gpu(SHARED_MEMORY["H200 (sm90)"])
    args = {"q_ptr": torch.empty(1, dtype=torch.float16), "N": 4096}
    assert len(tuner.early_config_prune(tuner.configs, args, HEAD_DIM=64)) > 1
    monkeypatch.setenv(tuning.ONE_CONFIG, "1")
    assert len(tuner.early_config_prune(tuner.configs, args, HEAD_DIM=64)) == 1
