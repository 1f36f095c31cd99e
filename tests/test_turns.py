"""Graders share a GPU except during timed checks (grader.turns): a timed check waits for the
checks running there and holds back new ones, a timed check waiting is not overtaken, a stuck
holder only delays the others, and waiting is not counted against the student's time limit."""

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


class Grader:
    """Another grader's process: takes the lock (exclusive for a timed check), holds it `seconds`,
    and writes when it got it and when it was about to let go."""

    def __init__(self, path, tmp_path, name, exclusive, seconds):
        self.got, self.left = tmp_path / f"{name}.got", tmp_path / f"{name}.left"
        code = textwrap.dedent(f"""
            import pathlib, time
            from grader.turns import turn
            with turn(pathlib.Path({str(path)!r}), 60, exclusive={exclusive}, say=lambda text: None):
                pathlib.Path({str(self.got)!r}).write_text(repr(time.time()))
                time.sleep({seconds})
                pathlib.Path({str(self.left)!r}).write_text(repr(time.time()))  # just before letting go
        """)
        self.proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)

    def wait_until(self, flag, timeout=60.0):
        deadline = time.monotonic() + timeout
        while not flag.exists():
            assert self.proc.poll() is None and time.monotonic() < deadline, f"{flag.name} never happened"
            time.sleep(0.02)
        return float(flag.read_text())

    def done(self):
        self.proc.wait(60)
        return float(self.got.read_text()), float(self.left.read_text())

    def kill(self):
        self.proc.kill()
        self.proc.wait()


WAITING_FOR_TIMED = "waiting for the GPU: another grader is timing kernels on it"
WAITING_TO_TIME = "waiting for the GPU: other graders are running checks on it, and a timed check needs it to itself"


@pytest.mark.parametrize(
    "held_by_timed, mine_timed, message",
    [(False, True, WAITING_TO_TIME), (True, False, WAITING_FOR_TIMED), (True, True, WAITING_TO_TIME)],
    ids=["timed after ordinary", "ordinary after timed", "timed after timed"],
)
def test_a_timed_check_never_shares_the_gpu(tmp_path, held_by_timed, mine_timed, message):
    lock = tmp_path / "gpu.lock"
    other = Grader(lock, tmp_path, "other", exclusive=held_by_timed, seconds=2.0)
    other.wait_until(other.got)
    said = []
    with turn(lock, 60, exclusive=mine_timed, say=said.append):
        started = time.time()
    assert started >= other.done()[1], "two checks ran on the GPU at once, one of them timed"
    assert said == [message]


def test_ordinary_checks_share_the_gpu_at_once(tmp_path):
    said = []
    with turn(tmp_path / "gpu.lock", 60, exclusive=False, say=said.append):
        with turn(tmp_path / "gpu.lock", 60, exclusive=False, say=said.append):  # a second grader
            pass
    assert said == []


def test_a_waiting_timed_check_is_not_overtaken(tmp_path):
    lock = tmp_path / "gpu.lock"
    first = Grader(lock, tmp_path, "first", exclusive=False, seconds=2.0)
    first.wait_until(first.got)
    timed = Grader(lock, tmp_path, "timed", exclusive=True, seconds=1.0)
    time.sleep(0.5)  # the timed check is now waiting for `first`
    with turn(lock, 60, exclusive=False, say=lambda text: None):  # arrives after the timed check
        started = time.time()
    timed_got, timed_left = timed.done()
    assert first.done()[1] <= timed_got, "the timed check started before the running check ended"
    assert started >= timed_left, "a check that arrived later overtook the waiting timed check"


def test_a_stuck_holder_delays_grading_but_does_not_stop_it(tmp_path):
    lock = tmp_path / "gpu.lock"
    stuck = Grader(lock, tmp_path, "stuck", exclusive=True, seconds=60)
    said = []
    try:
        stuck.wait_until(stuck.got)
        start = time.monotonic()
        with turn(lock, 1.5, exclusive=False, say=said.append):
            waited = time.monotonic() - start
    finally:
        stuck.kill()
    assert 1.5 <= waited < 10
    assert said[-1].startswith("waited 2 s for the GPU's lock") and said[-1].endswith("going on anyway")


@pytest.mark.parametrize("timed", [True, False])
@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_every_check_on_a_gpu_takes_its_turn_and_only_timed_ones_alone(monkeypatch, timed, device):
    taken = []
    monkeypatch.setattr(grader.turns, "_gpu_uuid", lambda: "GPU-fake")
    monkeypatch.setattr(
        grader.turns, "turn", lambda path, wait, exclusive: contextlib.nullcontext(taken.append((path.name, exclusive)))
    )
    chk = next(c for c in find("08").checks if c.timed == timed)
    with gpu_turn(chk, Context(device, 1)):
        pass
    assert taken == ([("flash-attention-course-gpu-GPU-fake.lock", timed)] if device == "cuda" else [])


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
