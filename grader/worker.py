"""One grading process: runs an exercise's checks and appends one JSON line per event to a file.

The runner (grader.runner) starts it, watches the file, and restarts it past a check that hung or
crashed the process, so one broken kernel costs only its own check.
"""

import argparse
import json
import sys
import warnings
from dataclasses import asdict

from common import env

# A failed CUDA launch poisons the whole CUDA context: later checks must run in a fresh process.
EXIT_CUDA_ERROR = 3


def _emit(path: str, event: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(event) + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--exercise", required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--results", required=True)
    parser.add_argument("--skip", default="")
    args = parser.parse_args(argv)

    mode = env.setup()
    # The interpreter computes masked-off lanes too (exp of -inf, 0/0) and numpy warns about them;
    # those values are discarded by the masks, so the warnings would only bury the report.
    warnings.filterwarnings("ignore", module="triton.runtime.interpreter")
    warnings.filterwarnings("ignore", category=RuntimeWarning, module="numpy")
    from grader.core import Context, Result, run_check
    from grader.exercises import find
    from grader.loader import ImportFailed, load_implementation

    exercise = find(args.exercise)
    skip = set(filter(None, args.skip.split(",")))
    checks = [c for c in exercise.checks if c.name not in skip]
    try:
        impl = load_implementation(exercise, args.target)
    except ImportFailed as exc:
        for c in checks:
            _emit(args.results, {"event": "result", **asdict(Result(c.name, c.points, 0.0, "failed", str(exc), description=c.description))})
        return 0
    ctx = Context(device=mode.device, seed=args.seed)
    for c in checks:
        _emit(args.results, {"event": "start", "check": c.name})
        result = run_check(c, impl, ctx)
        _emit(args.results, {"event": "result", **asdict(result)})
        if ctx.gpu and "CUDA error" in result.message:
            return EXIT_CUDA_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())
