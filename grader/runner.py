"""Grade exercises in child processes with time limits, so hangs and crashes stay contained."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from grader.core import Result
from grader.worker import EXIT_CUDA_ERROR

ROOT = Path(__file__).resolve().parent.parent


def _read_events(path: Path) -> list:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _why_it_died(returncode, timed_out: bool, limit: float) -> str:
    if timed_out:
        return (
            f"timed out after {limit:.0f} s: the kernel (or your Python code) never finished. "
            "Usual causes: a loop whose bound never ends (e.g. stepping by 0, or a while loop), "
            "or a grid far larger than the problem. In the interpreter, a store outside its tensor "
            "can also corrupt memory and hang the process: check every mask."
        )
    if returncode is not None and returncode < 0:
        name = signal.Signals(-returncode).name
        return (
            f"the grading process was killed by {name} while running this check. "
            "Usual cause: a load or store outside its tensor (check every mask and offset)."
        )
    if returncode == EXIT_CUDA_ERROR:
        return "a CUDA error in an earlier check left the GPU unusable for this one"
    return f"the grading process exited with status {returncode} before this check finished (did your code call exit()?)"


def grade_exercise(exercise, target: Path, seed: int, time_limit: float, only=None) -> list:
    """Results of the checks of `exercise` (all, or those named in `only`), in order.

    `time_limit` applies to each check.
    """
    checks = [c for c in exercise.checks if only is None or c.name in only]
    results = {c.name: None for c in exercise.checks if c not in checks}
    while len(results) < len(exercise.checks):
        with tempfile.TemporaryDirectory() as tmp:
            events_path = Path(tmp) / "events.jsonl"
            cmd = [sys.executable, "-m", "grader.worker", "--exercise", exercise.number,
                   "--target", str(Path(target).resolve()), "--seed", str(seed),
                   "--results", str(events_path), "--skip", ",".join(results)]
            proc = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True, stdout=2,  # student prints go to stderr
                                    env=os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))})
            started, running, timed_out = time.monotonic(), None, False
            while proc.poll() is None:
                time.sleep(0.1)
                events = _read_events(events_path)
                now_running = events[-1]["check"] if events and events[-1]["event"] == "start" else None
                if now_running != running:
                    running, started = now_running, time.monotonic()
                if time.monotonic() - started > time_limit:
                    timed_out = True
                    _kill(proc)
            events = _read_events(events_path)
        for e in events:
            if e.pop("event") == "result":
                results[e["name"]] = Result(**e)
        unfinished = [c for c in checks if c.name not in results]
        if unfinished and (proc.returncode != 0 or timed_out):
            culprit = next((c for c in unfinished if c.name == running), unfinished[0])
            results[culprit.name] = Result(culprit.name, culprit.points, 0.0, "failed",
                                           _why_it_died(proc.returncode, timed_out, time_limit),
                                           description=culprit.description)
        elif unfinished:
            raise RuntimeError(f"grader worker stopped early without an error for exercise {exercise.number}")
    return [results[c.name] for c in checks]
