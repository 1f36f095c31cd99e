"""Reports: the text a student reads, the summary table, and Gradescope's results.json."""

import json
import textwrap

MARK = {"passed": "pass", "failed": "FAIL", "not implemented": "todo", "needs a GPU": "gpu "}


def _fmt(points: float) -> str:
    return f"{points:g}"


# One rule for checks that need a GPU, in the terminal, in results.json and in nbgrader: they count
# towards the maximum everywhere (the course's points are the same on every machine); without a GPU
# they are not run, earn 0 and are shown as pending ("gpu"), never as failed.
PENDING = "needs a GPU"
PENDING_TEXT = "pending: this check needs a CUDA GPU (the interpreter cannot check it); it earns 0 until graded on one"


def pending(results) -> list:
    """Checks that could not run here because they need a GPU."""
    return [r for r in results if r.status == PENDING]


def totals(results) -> tuple:
    return sum(r.earned for r in results), sum(r.points for r in results)


def pending_note(results, short: bool = False) -> str:
    points = sum(r.points for r in pending(results))
    if not points:
        return ""
    need = (
        f"{_fmt(points)} {'needs' if points == 1 else 'need'} a GPU"
        if short
        else f"{_fmt(points)} of them {'needs' if points == 1 else 'need'} a GPU: pending, not run here"
    )
    return f" ({need})"


def exercise_report(exercise, results) -> str:
    earned, possible = totals(results)
    lines = [f"Exercise {exercise.number}: {exercise.title}"]
    for r in results:
        score = f"{_fmt(r.earned)}/{_fmt(r.points)}"
        lines.append(f"  [{MARK[r.status]}] {score:>7}  {r.name:<28} {r.description}  ({r.seconds:.1f} s)")
        if r.status == PENDING:
            lines.append(" " * 20 + PENDING_TEXT)
        elif r.message:  # why it failed, or what a passed check measured
            lines.extend(textwrap.indent(m, " " * 20) for m in r.message.splitlines())
    lines.append(f"  Total: {_fmt(earned)}/{_fmt(possible)}{pending_note(results)}")
    return "\n".join(lines)


def summary_table(graded) -> str:
    """graded: list of (exercise, results)."""
    lines = ["", "Summary", f"  {'exercise':<36} {'points':>9}"]
    for exercise, results in graded:
        earned, possible = totals(results)
        note = pending_note(results, short=True)
        lines.append(f"  {exercise.number} {exercise.title:<33} {_fmt(earned):>4}/{_fmt(possible):<4}{note}")
    earned = sum(totals(r)[0] for _, r in graded)
    possible = sum(totals(r)[1] for _, r in graded)
    note = pending_note([r for _, results in graded for r in results])
    lines.append(f"  {'total':<36} {_fmt(earned):>4}/{_fmt(possible):<4}{note}")
    return "\n".join(lines)


def gradescope(graded, header: str, seconds: float) -> str:
    """Gradescope's results.json for the graded exercises."""
    tests: list[dict] = []
    for exercise, results in graded:
        for r in results:
            if not 0 <= r.earned <= r.points:  # results come from the grader's side only: this is a grader bug
                raise ValueError(f"{exercise.number} {r.name}: {r.earned} points earned of {r.points}")
            tests.append(
                {
                    "name": f"{exercise.number} {exercise.title}: {r.name}",
                    "number": f"{exercise.number}.{len([t for t in tests if t['number'].startswith(exercise.number)]) + 1}",
                    "score": r.earned,
                    "max_score": r.points,
                    "status": "passed" if r.status == "passed" else "failed",
                    "output": "\n".join(
                        filter(None, [r.description, PENDING_TEXT if r.status == PENDING else r.message])
                    ),
                    "visibility": "visible",
                    "tags": [exercise.folder],
                }
            )
    return json.dumps(
        {
            "score": sum(t["score"] for t in tests),
            "execution_time": round(seconds, 1),
            "output": header,
            "visibility": "visible",
            "stdout_visibility": "hidden",
            "tests": tests,
        },
        indent=2,
    )
