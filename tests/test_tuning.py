"""The autotuning rules, checked on a CPU with the GPU faked: every course kernel gets configs that
fit on an H200, an A100 and a T4; the tuner times each bucket of N once, keeps its winners on disk
(a damaged or forged file only costs a new tuning), skips configs that do not compile, and grading
launches one config without timing."""

import json
import os
import subprocess
import sys
import types

import pytest
import torch
import triton

from common import reference, tuning
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


# ----------------------------------------------------------------------------- the tuner itself
class FakeKernel:
    """Stands for a @triton.jit kernel: records what would be compiled and launched."""

    arg_names = ["q_ptr", "N", "sm_scale", "HEAD_DIM"]
    cache_key = "fake kernel source"
    launches: list = []  # every launch of every fake kernel, in order

    def __init__(self):
        self.compiled = []

    def __getitem__(self, grid):
        return lambda *args, **meta: FakeKernel.launches.append((grid, meta))

    def warmup(self, *args, grid, **meta):
        self.compiled.append(meta["BLOCK_M"])


MILLISECONDS = {32: 3.0, 64: 1.0, 128: 2.0}  # the fake kernel's time by BLOCK_M
ONE_TUNING = 2 * len(MILLISECONDS)  # timings in one tuning: each config in order, then in reverse order


@pytest.fixture
def bench(monkeypatch, tmp_path):
    """A fake GPU for the tuner: its cache in tmp_path, each config's time from MILLISECONDS,
    and the configs that `failing` names do not compile."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tuning, "_grading", False)
    monkeypatch.setattr(tuning, "device_name", lambda: "Fake GPU")
    monkeypatch.setattr(FakeKernel, "launches", [])
    timed, failing = [], set()
    gpu = types.SimpleNamespace(timed=timed, failing=failing, folder=tmp_path, drift=0.0)

    def do_bench(fn, **options):
        fn()
        block_m = FakeKernel.launches[-1][1]["BLOCK_M"]
        timed.append(block_m)
        if block_m in failing:
            raise triton.runtime.errors.OutOfResources(1, 0, "shared memory")
        return MILLISECONDS[block_m] + gpu.drift * (len(timed) - 1)  # a clock that slows down as it heats

    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    return gpu


def tuned(kernel=None, prune=lambda configs, named, **kw: configs, blocks=tuple(MILLISECONDS)):
    configs = [triton.Config({"BLOCK_M": m}, num_warps=4, num_stages=3) for m in blocks]
    return tuning.autotune(configs, key=["N", "HEAD_DIM"], prune=prune)(kernel or FakeKernel())


def launch(tuner, N, dtype=torch.float16):
    tuner[lambda meta: (triton.cdiv(N, meta["BLOCK_M"]),)](torch.empty(1, dtype=dtype), N, 0.125, HEAD_DIM=64)
    grid, meta = FakeKernel.launches[-1]
    return grid[0], meta["BLOCK_M"], meta["num_warps"]


def test_buckets_round_up_to_powers_of_two_up_to_the_longest():
    lengths = (1, 2, 17, 100, 128, 129, 1000, 4096, 5000, 16384, 65536)
    assert [tuning.bucket(n) for n in lengths] == [1, 2, 32, 128, 128, 256, 1024, 4096, 8192, 8192, 8192]
    assert tuning.bucket(True) is True and tuning.bucket(torch.float16) is torch.float16


def test_tunes_once_per_bucket_and_launches_the_fastest(bench):
    tuner = tuned()
    assert launch(tuner, 100) == (2, 64, 4)  # grid from the winner's BLOCK_M; its num_warps passed on
    assert sorted(bench.timed) == [32, 32, 64, 64, 128, 128] and sorted(tuner.kernel.compiled) == [32, 64, 128]
    assert launch(tuner, 120) == (2, 64, 4) and launch(tuner, 100) == (2, 64, 4)
    assert len(bench.timed) == ONE_TUNING  # same bucket: no new timing
    launch(tuner, 4096), launch(tuner, 8192), launch(tuner, 16384), launch(tuner, 65536)
    assert len(bench.timed) == 3 * ONE_TUNING  # a tuning for 4096, one for 8192 and beyond
    launch(tuner, 100, torch.bfloat16)
    assert len(bench.timed) == 4 * ONE_TUNING  # another dtype is another key


def test_a_clock_that_drifts_during_the_tuning_does_not_favour_the_configs_timed_first(bench):
    bench.drift = 1.5  # ms added to every timing after the first: 128 timed first looks fastest in one pass
    assert launch(tuned(blocks=(128, 64)), 100)[1] == 64
    assert bench.timed == [128, 64, 64, 128]


def test_triton_print_autotuning_shows_what_a_tuning_timed(bench, monkeypatch, capsys):
    launch(tuned(), 100)
    assert capsys.readouterr().err == ""  # silent unless asked
    monkeypatch.setenv(tuning.PRINT, "1")
    launch(tuned(), 1000)
    header, *rows = capsys.readouterr().err.splitlines()
    assert len(rows) == 3
    assert header.startswith("course tuner: ") and "N=1024, HEAD_DIM=64" in header and "reverse order" in header
    assert [row.startswith(f"  BLOCK_M: {m}, num_warps: 4") for m, row in zip((32, 64, 128), rows)] == [True] * 3
    assert [row.endswith("1.0000 1.0000  <- chosen") for row in rows] == [False, True, False]


def test_winners_are_kept_for_the_next_process(bench):
    launch(tuned(), 100)
    again = tuned()  # a new process: nothing in memory, the file on disk
    assert launch(again, 100)[1] == 64 and len(bench.timed) == ONE_TUNING
    launch(again, 1000)
    assert len(bench.timed) == 2 * ONE_TUNING  # a key never tuned is tuned


@pytest.mark.parametrize("content", ["not json", "[1, 2]", '{"KEY": 7}', '{"KEY": "0"}', '{"KEY": -1}'])
def test_a_damaged_or_forged_file_only_costs_a_new_tuning(bench, content):
    launch(tuned(), 100)
    (saved,) = (bench.folder / "course-tuning").iterdir()
    key = next(iter(json.loads(saved.read_text())))
    saved.write_text(content.replace("KEY", key.replace('"', '\\"')))
    assert launch(tuned(), 100)[1] == 64 and len(bench.timed) == 2 * ONE_TUNING


def test_a_saved_winner_the_pruner_now_refuses_is_tuned_again(bench):
    launch(tuned(), 100)  # 64 wins and is saved; the next process prunes it away (say, it does not fit)
    assert launch(tuned(prune=lambda configs, named, **kw: configs[::2]), 100)[1] == 128
    assert len(bench.timed) == ONE_TUNING + 4  # two candidates left, each timed twice


def test_a_config_that_does_not_compile_is_never_chosen(bench):
    bench.failing.add(64)
    assert launch(tuned(), 100)[1] == 128


def test_grading_launches_the_first_config_without_timing(bench, monkeypatch):
    monkeypatch.setattr(tuning, "_grading", True)  # as in a process started with COURSE_ONE_CONFIG=1
    assert launch(tuned(), 100)[1] == 32
    assert bench.timed == [] and not (bench.folder / "course-tuning").exists()


@pytest.mark.parametrize("value, grading", [("1", True), ("0", False), (None, False)])
def test_a_process_started_by_a_grader_grades(value, grading):
    env = {k: v for k, v in os.environ.items() if k != tuning.ONE_CONFIG} | (
        {tuning.ONE_CONFIG: value} if value else {}
    )
    code = "from common import tuning; print(tuning._grading)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == str(grading), out.stderr


def test_the_grader_runs_the_solution_as_the_student_code_runs(bench):
    """one_config(): the grader's own kernels (08's speed check runs the solution) untuned, as a
    student's; the environment is as before afterwards, and a kernel met outside it is tuned."""
    tuner = tuned()
    with tuning.one_config():
        assert launch(tuner, 100)[1] == 32 and bench.timed == []
    assert not tuning._grading
    assert launch(tuner, 100)[1] == 64 and len(bench.timed) == ONE_TUNING
    with tuning.one_config():
        assert launch(tuner, 100)[1] == 32  # and back: the grader's choice again


def test_a_course_kernel_runs_through_the_tuner(gpu, monkeypatch):
    """The GPU launch path, run by the interpreter: exercise 04's kernel launched by its tuner
    (key values found by position and keyword, the config's blocks in the grid and the launch)."""
    monkeypatch.setattr(tuning, "_grading", True)
    gpu(SHARED_MEMORY["H200 (sm90)"])
    module = load_module(ROOT / "solutions" / KERNELS["_attn_fwd_tuned"][0])
    B, H, N, d = 1, 2, 100, 16
    q, k, v = (torch.randn(B, H, N, d) for _ in range(3))
    o, lse = torch.full_like(q, float("nan")), torch.empty(B, H, N)
    args = (q, k, v, o, lse, *q.stride(), *k.stride(), *v.stride(), *o.stride(), H, N, 0.25)
    module._attn_fwd_tuned[lambda meta: (triton.cdiv(N, meta["BLOCK_M"]), B * H)](*args, HEAD_DIM=d, CAUSAL=True)
    expected, expected_lse = reference.attention(q, k, v, causal=True, sm_scale=0.25)
    torch.testing.assert_close(o.double(), expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(lse.double(), expected_lse, atol=1e-4, rtol=1e-4)


def test_a_key_first_met_during_a_cuda_graph_capture_is_refused_with_the_remedy(bench, monkeypatch):
    tuner = tuned()
    launch(tuner, 100)  # tuned before the capture: launches in a capture are fine
    monkeypatch.setattr(tuning, "capturing", lambda: True)
    assert launch(tuner, 100)[1] == 64
    with pytest.raises(RuntimeError, match="call it once with inputs of this shape before the capture"):
        launch(tuner, 1000)
    assert len(bench.timed) == ONE_TUNING  # nothing was timed inside the capture
