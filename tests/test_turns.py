"""Graders take turns on a GPU for timed checks (grader.turns): a second grader waits, a stuck one
only delays the others, and waiting is not counted against the student's time limit."""

import contextlib
import subprocess
import sys
import textwrap
import time

import pytest

import grader.runner
import grader.turns
from grader.core import Context
from grader.exercises import EXERCISES, find
from grader.runner import ROOT, grade_exercise
from grader.turns import gpu_turn, turn


def _holder(path, seconds, tmp_path):
    """Another grader's process: takes the lock, says so in a file, holds it `seconds`."""
    flag = tmp_path / "held"
    code = textwrap.dedent(f"""
        import pathlib, time
        from grader.turns import turn
        with turn(pathlib.Path({str(path)!r}), 60):
            pathlib.Path({str(flag)!r}).write_text("held")
            time.sleep({seconds})
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)
    deadline = time.monotonic() + 60
    while not flag.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the holder never took the lock"
        time.sleep(0.05)
    return proc


def test_a_second_grader_waits_for_the_first(tmp_path):
    path = tmp_path / "gpu.lock"
    holder = _holder(path, 2.0, tmp_path)
    said = []
    start = time.monotonic()
    with turn(path, wait=60, say=said.append):
        waited = time.monotonic() - start
        assert holder.poll() is not None, "the lock was granted while the other grader still held it"
    holder.wait()
    assert waited > 1.0
    assert said and "another grader is timing kernels" in said[0]


def test_a_stuck_holder_delays_grading_but_does_not_stop_it(tmp_path):
    path = tmp_path / "gpu.lock"
    holder = _holder(path, 60, tmp_path)
    said = []
    try:
        start = time.monotonic()
        with turn(path, wait=0.5, say=said.append):
            waited = time.monotonic() - start
    finally:
        holder.kill()
        holder.wait()
    assert 0.5 <= waited < 10
    assert "timing anyway" in said[-1]


def test_a_free_gpu_is_taken_without_a_word(tmp_path):
    said = []
    with turn(tmp_path / "gpu.lock", wait=60, say=said.append):
        pass
    with turn(tmp_path / "gpu.lock", wait=60, say=said.append):  # released on leaving
        pass
    assert said == []


@pytest.mark.parametrize("timed", [True, False])
@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_only_timed_checks_on_a_gpu_take_turns(monkeypatch, timed, device):
    taken = []
    monkeypatch.setattr(grader.turns, "_gpu_uuid", lambda: "GPU-fake")
    monkeypatch.setattr(grader.turns, "turn", lambda path, wait: contextlib.nullcontext(taken.append(path.name)))
    chk = next(c for c in find("08").checks if c.timed == timed)
    with gpu_turn(chk, Context(device, 1)):
        pass
    assert taken == (["flash-attention-course-gpu-GPU-fake.lock"] if timed and device == "cuda" else [])


def test_the_timed_checks_are_those_that_compare_two_timings():
    timed = {(ex.number, c.name) for ex in EXERCISES for c in ex.checks if c.timed}
    assert timed == {("08", "honest_timing"), ("08", "forward_speed")}
    assert all(c.gpu_only for ex in EXERCISES for c in ex.checks if c.timed)


def test_waiting_for_the_gpu_is_not_charged_to_the_student(monkeypatch):
    @contextlib.contextmanager
    def slow_turn(check, ctx):
        time.sleep(6)  # longer than the check's whole time limit
        yield

    monkeypatch.setattr(grader.runner, "gpu_turn", slow_turn)
    (result,) = grade_exercise(find("08"), ROOT / "solutions", seed=7, time_limit=5, only=("formulas",))
    assert result.status == "passed", result.message
