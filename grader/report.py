"""Reports: the text a student reads, the summary table, and Gradescope's results.json."""

import json
import textwrap

MARK = {"passed": "pass", "failed": "FAIL", "not implemented": "todo", "needs a GPU": "gpu "}


def _fmt(points: float) -> str:
    return f"{points:g}"


def counted(results) -> list:
    """Results that count towards the total here (GPU-only checks do not count on a CPU)."""
    return [r for r in results if r.status != "needs a GPU"]


def totals(results) -> tuple:
    mine = counted(results)
    return sum(r.earned for r in mine), sum(r.points for r in mine)


def exercise_report(exercise, results) -> str:
    earned, possible = totals(results)
    lines = [f"Exercise {exercise.number}: {exercise.title}"]
    for r in results:
        score = f"{_fmt(r.earned)}/{_fmt(r.points)}"
        lines.append(f"  [{MARK[r.status]}] {score:>7}  {r.name:<28} {r.description}  ({r.seconds:.1f} s)")
        if r.status != "passed" and r.message:
            lines.extend(textwrap.indent(m, " " * 20) for m in r.message.splitlines())
    gpu = [r for r in results if r.status == "needs a GPU"]
    note = f"  (+{_fmt(sum(r.points for r in gpu))} points checked only on a GPU)" if gpu else ""
    lines.append(f"  Total: {_fmt(earned)}/{_fmt(possible)}{note}")
    return "\n".join(lines)


def summary_table(graded) -> str:
    """graded: list of (exercise, results)."""
    lines = ["", "Summary", f"  {'exercise':<36} {'points':>9}"]
    for exercise, results in graded:
        earned, possible = totals(results)
        lines.append(f"  {exercise.number} {exercise.title:<33} {_fmt(earned):>4}/{_fmt(possible):<4}")
    earned = sum(totals(r)[0] for _, r in graded)
    possible = sum(totals(r)[1] for _, r in graded)
    lines.append(f"  {'total':<36} {_fmt(earned):>4}/{_fmt(possible):<4}")
    return "\n".join(lines)


def gradescope(graded, header: str, seconds: float) -> str:
    """Gradescope's results.json for the graded exercises."""
    tests = []
    for exercise, results in graded:
        for r in counted(results):
            tests.append({
                "name": f"{exercise.number} {exercise.title}: {r.name}",
                "number": f"{exercise.number}.{len([t for t in tests if t['number'].startswith(exercise.number)]) + 1}",
                "score": r.earned,
                "max_score": r.points,
                "status": "passed" if r.status == "passed" else "failed",
                "output": r.description + ("\n" + r.message if r.message else ""),
                "visibility": "visible",
                "tags": [exercise.folder],
            })
    return json.dumps({
        "score": sum(t["score"] for t in tests),
        "execution_time": round(seconds, 1),
        "output": header,
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
    }, indent=2)
