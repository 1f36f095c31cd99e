"""Grading one exercise: the checks run here, the student's code in its own sandboxed process.

This process holds the seed, builds the inputs and references, compares and scores; the student's
process (grader.sandbox) only ever receives input tensors and returns output tensors. A hang, a
crash, an exit or a CUDA error there costs the check that was running, with a message, and a fresh
process serves the next check; an import that fails or hangs is charged once, to every check.
"""

import sys
import time
from pathlib import Path

from common import env
from grader.core import Context, Result, run_check
from grader.loader import RemoteImplementation
from grader.sandbox import ROOT, Sandbox, StudentProcess  # noqa: F401 - ROOT: where the course lives
from grader.static import explain, violations
from grader.turns import gpu_turn


def grade_exercise(exercise, target: Path, seed: int, time_limit: float, only=None, compile_cache=None) -> list:
    """Results of the checks of `exercise` (all, or those named in `only`), in order.

    `time_limit` applies to each check. `compile_cache`: see grader.sandbox.Sandbox.
    """
    from grader.exercises import EXERCISES

    mode = env.setup()
    checks = [c for c in exercise.checks if only is None or c.name in only]
    refused = _refused(exercise, Path(target))
    if refused:
        return [Result(c.name, c.points, 0.0, "failed", refused, description=c.description) for c in checks]
    sandbox = Sandbox(target, [e.folder for e in EXERCISES], compile_cache)
    process = StudentProcess(sandbox, exercise, mode.device)
    impl = RemoteImplementation(process, f"{exercise.folder}/{exercise.module}.py", exercise.kernels_only)
    ctx = Context(device=mode.device, seed=seed)
    results = []
    try:
        for c in checks:
            with gpu_turn(c, ctx):  # before the clock starts: waiting for the GPU is not the student's time
                process.limit, process.deadline = time_limit, time.monotonic() + time_limit
                result = run_check(c, impl, ctx)
            _show_printed(exercise, c, process.printed())
            if "CUDA error" in result.message:  # a failed launch poisons the process's CUDA context
                process.stop()
            results.append(result)
    finally:
        process.close()
        sandbox.remove()
    return results


def _refused(exercise, target: Path) -> str:
    """Why the student's modules may not run at all (grader.static), or ''."""
    from grader.exercises import EXERCISES

    found = []
    for ex in EXERCISES:
        path = target / ex.folder / f"{ex.module}.py"
        if path.is_file() and not path.is_symlink() and (ex is exercise or exercise.number > ex.number):
            found += violations(path.read_text(errors="replace"), f"{ex.folder}/{path.name}", exercise.extra_imports)
    return explain(found) if found else ""


def _show_printed(exercise, check, text: str) -> None:
    """Show what the student's code printed during a check (on stderr, never mixed into the report)."""
    if text.strip():
        body = "\n".join(f"  | {line}" for line in text.rstrip().splitlines())
        print(f"[{exercise.number} {check.name}] your code printed:\n{body}", file=sys.stderr, flush=True)
