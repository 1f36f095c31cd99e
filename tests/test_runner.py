"""The grader survives hostile and broken student code, and its outputs are well-formed."""

import json
import shutil
import textwrap

import pytest

import grader.runner
from grader import zygote
from grader.__main__ import main as grade_main
from grader.exercises import find
from grader.runner import ROOT, grade_exercise
from grader.sandbox import Sandbox, compile_cache_for

HOSTILE_MATMUL = (ROOT / "solutions" / "01_tiled_matmul" / "matmul.py").read_text() + textwrap.dedent("""

    import os, signal, time

    honest_matmul = matmul


    def matmul(a, b):
        if a.shape == (128, 128):      # aligned_fp32: never returns
            while True:
                time.sleep(0.1)
        if a.shape == (100, 70):       # ragged_shapes: kills the process
            os.kill(os.getpid(), signal.SIGSEGV)
        if a.shape == (96, 200):       # fp16_inputs: wrong shape
            return honest_matmul(a[:3, :3], b[:3, :3])
        if a.shape == (70, 90):        # transposed_views: leaves the output unwritten
            honest_matmul(a, b)
            return torch.empty(a.shape[0], b.shape[1], dtype=a.dtype)
        return honest_matmul(a, b)
""")


@pytest.fixture
def hostile_course(tmp_path, monkeypatch):
    monkeypatch.setattr(grader.runner, "_refused", lambda exercise, target: "")  # it imports os and signal
    folder = tmp_path / "01_tiled_matmul"
    folder.mkdir()
    (folder / "matmul.py").write_text(HOSTILE_MATMUL)
    return tmp_path


def test_hang_crash_and_wrong_outputs_are_contained(hostile_course):
    results = {r.name: r for r in grade_exercise(find("01"), hostile_course, seed=7, time_limit=40)}
    assert "timed out after 40 s" in results["aligned_fp32"].message
    assert "SIGSEGV" in results["ragged_shapes"].message
    assert "has shape (3, 3), expected (96, 80)" in results["fp16_inputs"].message
    assert "NaN" in results["transposed_views"].message and "never written" in results["transposed_views"].message
    assert results["many_tiles"].status == "passed"  # graded after the hang and the crash
    assert sum(r.earned for r in results.values()) == results["many_tiles"].points


def test_pytorch_only_answer_earns_nothing(tmp_path):
    (tmp_path / "02_safe_softmax").mkdir()
    (tmp_path / "02_safe_softmax" / "safe_softmax.py").write_text(
        "import torch\n\ndef softmax(x):\n    return torch.softmax(x.float(), -1).nan_to_num().to(x.dtype)\n"
    )
    results = grade_exercise(find("02"), tmp_path, seed=7, time_limit=30)
    assert all(r.earned == 0 and "called torch.softmax" in r.message for r in results)


def test_an_answer_without_a_kernel_launch_earns_nothing(tmp_path):
    (tmp_path / "02_safe_softmax").mkdir()
    (tmp_path / "02_safe_softmax" / "safe_softmax.py").write_text("def softmax(x):\n    return x.clone()\n")
    results = grade_exercise(find("02"), tmp_path, seed=7, time_limit=30, only=("short_rows",))
    assert results[0].earned == 0 and "without launching a Triton kernel" in results[0].message


def test_an_exception_is_located_in_the_student_file(tmp_path):
    (tmp_path / "02_safe_softmax").mkdir()
    (tmp_path / "02_safe_softmax" / "safe_softmax.py").write_text("def softmax(x):\n    return x.view(3, -1, 7)\n")
    result = grade_exercise(find("02"), tmp_path, seed=7, time_limit=30)[0]
    assert result.message.startswith("your code raised RuntimeError: shape '[3, -1, 7]' is invalid")
    assert "at 02_safe_softmax/safe_softmax.py:2: return x.view(3, -1, 7)" in result.message


def test_syntax_error_costs_every_check_with_its_line(tmp_path):
    (tmp_path / "02_safe_softmax").mkdir()
    (tmp_path / "02_safe_softmax" / "safe_softmax.py").write_text("def softmax(x):\n    return x +\n")
    results = grade_exercise(find("02"), tmp_path, seed=7, time_limit=30)
    assert all(r.earned == 0 and "line 2: SyntaxError" in r.message for r in results)


def test_missing_function_is_named(tmp_path):
    (tmp_path / "02_safe_softmax").mkdir()
    (tmp_path / "02_safe_softmax" / "safe_softmax.py").write_text("def soft_max(x):\n    return x\n")
    results = grade_exercise(find("02"), tmp_path, seed=7, time_limit=30)
    assert all("does not define softmax()" in r.message for r in results)


def test_cli_grades_other_exercises_after_a_crash_and_writes_gradescope_json(hostile_course, tmp_path, capsys):
    shutil.copytree(ROOT / "solutions" / "03_online_softmax", hostile_course / "03_online_softmax")
    out = tmp_path / "results.json"
    assert (
        grade_main(
            ["01", "03", "--target", str(hostile_course), "--seed", "5", "--time-limit", "40", "--json", str(out)]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "Seed: 5" in printed and "Summary" in printed
    data = json.loads(out.read_text())
    assert set(data) >= {"score", "execution_time", "output", "visibility", "stdout_visibility", "tests"}
    tests = {t["name"]: t for t in data["tests"]}
    assert tests["03 online softmax: long_rows"]["status"] == "passed"
    assert tests["01 tiled matmul: ragged_shapes"]["score"] == 0
    for t in data["tests"]:
        assert set(t) >= {"name", "score", "max_score", "status", "output", "visibility", "number"}
        assert t["status"] in ("passed", "failed") and 0 <= t["score"] <= t["max_score"]
    assert data["score"] == sum(t["score"] for t in data["tests"]) == 10 + 1


@pytest.mark.parametrize(
    "argv,message",
    [
        (["99"], "no exercise '99'"),
        (["01", "--target", "/nonexistent/course"], "is not a directory"),
    ],
)
def test_bad_arguments_are_named(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        grade_main(argv)
    assert message in str(exc.value)


def test_library_code_runs_as_the_sandbox_user(tmp_path, monkeypatch):
    """torch and triton ask who the user is (their caches); the sandbox user has no passwd entry."""
    monkeypatch.setattr(grader.runner, "_refused", lambda exercise, target: "")
    (tmp_path / "02_safe_softmax").mkdir()
    solution = (ROOT / "solutions" / "02_safe_softmax" / "safe_softmax.py").read_text()
    (tmp_path / "02_safe_softmax" / "safe_softmax.py").write_text(
        "import getpass\nUSER = getpass.getuser()\n" + solution
    )
    (result,) = grade_exercise(find("02"), tmp_path, seed=7, time_limit=60, only=("short_rows",))
    assert result.status == "passed", result.message


def test_a_cold_start_grades_the_same(monkeypatch):
    """COURSE_COLD_START=1: student processes import torch and triton after the fork, as a fresh
    interpreter would (the fallback should a platform not allow a warm fork)."""
    monkeypatch.setenv("COURSE_COLD_START", "1")
    (result,) = grade_exercise(find("02"), ROOT / "solutions", seed=7, time_limit=60, only=("short_rows",))
    assert result.status == "passed", result.message


def test_the_student_environment_on_a_gpu(monkeypatch):
    """On a GPU: packages imported before the fork (CUDA is set up only after it), and one
    autotuning config per kernel, in exercise 08 too (its timing checks compare like with like)."""
    from grader.sandbox import Sandbox, StudentProcess

    monkeypatch.delenv("COURSE_COLD_START", raising=False)
    sandbox = Sandbox(ROOT / "solutions", ["04_flash_forward"])
    try:
        gpu = StudentProcess(sandbox, find("04"), "cuda")._environment()
        cpu = StudentProcess(sandbox, find("04"), "cpu")._environment()
        timed = StudentProcess(sandbox, find("08"), "cuda")._environment()
    finally:
        sandbox.remove()
    assert gpu["COURSE_COLD_START"] == "0" and cpu["COURSE_COLD_START"] == "0"
    for device, student in (("cuda", gpu), ("cpu", cpu)):  # as the zygote imported the packages (HOME aside)
        shared = zygote.student_environment(device)
        assert {k: student.get(k) for k in shared if k != "HOME"} == {k: shared[k] for k in shared if k != "HOME"}
    assert gpu["COURSE_ONE_CONFIG"] == timed["COURSE_ONE_CONFIG"] == "1" and "COURSE_ONE_CONFIG" not in cpu
    assert "TRITON_INTERPRET" not in gpu and cpu["TRITON_INTERPRET"] == "1"


def test_the_grader_guesses_its_device_before_importing_torch(monkeypatch):
    """The zygote starts before the grader imports torch, for the device the grader will choose."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert zygote.likely_device() == "cpu"
    monkeypatch.delenv("TRITON_INTERPRET")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert zygote.likely_device() == "cpu"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setattr(zygote.os.path, "exists", lambda path: path == "/dev/nvidiactl")
    assert zygote.likely_device() == "cuda"


def test_a_zygote_for_another_device_is_ended(monkeypatch):
    monkeypatch.setattr(zygote, "RUNNING", None)
    cpu = zygote.start("cpu")
    assert zygote.start("cpu") is cpu
    gpu = zygote.start("cuda")
    assert cpu.proc.wait(timeout=30) != 0 and zygote.RUNNING is gpu
    gpu.proc.kill()
    gpu.proc.wait(timeout=30)


def test_a_targets_compile_cache_is_kept_between_its_runs(tmp_path):
    cache = tmp_path / "cache"
    box = Sandbox(ROOT / "solutions", ["01_tiled_matmul"], compile_cache=cache)
    written = box.scratch / ".triton" / "ab"
    written.mkdir(parents=True)
    (written / "kernel.cubin").write_bytes(b"compiled")
    (written / "escape").symlink_to("/etc/passwd")  # a link is never followed nor kept
    box.remove()
    assert (cache / "ab" / "kernel.cubin").read_bytes() == b"compiled"
    assert not (cache / "ab" / "escape").exists() and not (cache / "ab" / "escape").is_symlink()
    again = Sandbox(ROOT / "solutions", ["01_tiled_matmul"], compile_cache=cache)
    assert (again.scratch / ".triton" / "ab" / "kernel.cubin").read_bytes() == b"compiled"
    again.remove()


def test_only_practice_runs_of_the_course_folders_on_a_gpu_keep_compiled_kernels(tmp_path):
    from grader.__main__ import INSTRUCTOR_SEED, compile_cache

    practice, own = "Seed: 5 (SEED=5 reproduces this run)", ROOT / "exercises"
    assert compile_cache(own, gpu=True, fresh=False, seed_line=practice) == compile_cache_for(own)
    assert compile_cache_for(own) != compile_cache_for(ROOT / "solutions")  # one cache per target
    assert compile_cache(own, gpu=True, fresh=False, seed_line=INSTRUCTOR_SEED) is None
    assert compile_cache(own, gpu=True, fresh=True, seed_line=practice) is None
    assert compile_cache(own, gpu=False, fresh=False, seed_line=practice) is None
    assert compile_cache(tmp_path, gpu=True, fresh=False, seed_line=practice) is None  # a submission, say


def test_a_compile_cache_never_takes_what_a_link_points_to(tmp_path):
    secret = tmp_path / "grader-only"
    secret.mkdir()
    (secret / "seed").write_text("1234")
    box = Sandbox(ROOT / "solutions", ["01_tiled_matmul"], compile_cache=tmp_path / "cache")
    (box.scratch / ".triton").symlink_to(secret)
    box.remove()
    assert not (tmp_path / "cache").exists()


def test_a_dtype_clash_in_tl_dot_gets_its_cause():
    """What Triton raises for tl.dot(fp16, bf16) (a tile cast to a fixed tl.float16) teaches the fix."""
    from grader.core import explain_failure

    text = "CompilationError: at 57:14:\nBoth operands must be same dtype. Got fp16 and bf16"
    status, message = explain_failure({"text": text, "where": "flash_forward.py:85"})
    assert status == "failed" and message.startswith("your code raised CompilationError: at 57:14:")
    assert "p.to(v.dtype)" in message and "flash_forward.py:85" in message


def test_a_notebook_reports_student_errors_as_the_sandbox_does():
    """In a notebook the checks run the student's functions in-process (LocalImplementation): an
    untouched stub says "not implemented yet", and an exception is the student's, with its line."""
    from common.loader import load_module
    from grader.core import Context, run_check
    from grader.loader import LocalImplementation

    exercise = find("01")
    stub = vars(load_module(ROOT / "exercises" / "01_tiled_matmul" / "matmul.py"))
    result = run_check(exercise.checks[0], LocalImplementation(stub, "this notebook"), Context("cpu", 1))
    assert result.status == "not implemented" and "not implemented yet" in result.message

    def matmul(a, b):
        raise ValueError("shapes do not match")

    result = run_check(exercise.checks[0], LocalImplementation({"matmul": matmul}, "this notebook"), Context("cpu", 1))
    assert result.status == "failed" and result.message.startswith("your code raised ValueError: shapes do not match")
    assert "test_runner.py" in result.message  # the student's line


def test_every_check_runs_kernels_as_grading_does():
    """run_check, which make grade, pytest and notebooks share, runs each check with one config per
    kernel and no tuning (a notebook's kernels, the solution 08 compares with); after it, tuning is back."""
    from common import tuning
    from grader.core import Check, Context, run_check

    seen = []
    probe = Check("probe", 1, lambda impl, ctx: seen.append(tuning._grading), "records the tuner's mode")
    assert run_check(probe, None, Context("cpu", 1)).status == "passed"
    assert seen == [True] and not tuning._grading
