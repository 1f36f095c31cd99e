"""One rule for checks that need a GPU: the terminal, results.json, the notebooks and README agree.

They count towards the maximum everywhere; without a GPU they are not run, earn 0, and are shown
as pending.
"""

import json
import re

import nbformat.v4 as nbf
import pytest

from grader import notebooks, report
from grader.core import Result
from grader.exercises import EXERCISES, find
from grader.runner import ROOT


def _results():
    return [
        Result(name="fp16", points=2, earned=2.0, status="passed", message="", description="fp16 inputs"),
        Result(
            name="bf16",
            points=3,
            earned=0.0,
            status="needs a GPU",
            description="bf16 inputs",
            message="runs only on a CUDA GPU",
        ),
    ]


def test_terminal_and_results_json_count_pending_checks_the_same_way():
    exercise = find("04")
    text = report.exercise_report(exercise, _results())
    assert "Total: 2/5 (3 of them need a GPU: pending, not run here)" in text
    assert "[gpu ]" in text and report.PENDING_TEXT in text
    summary = report.summary_table([(exercise, _results()), (find("01"), _results()[:1])])
    assert "4/7" in summary and "(3 of them need a GPU" in summary.splitlines()[-1]
    results = json.loads(report.gradescope([(exercise, _results())], "header", 1.0))
    assert results["score"] == 2.0 and sum(t["max_score"] for t in results["tests"]) == 5
    pending = [t for t in results["tests"] if t["score"] == 0]
    assert len(pending) == 1 and report.PENDING_TEXT in pending[0]["output"]


def _cell(grade_id, points, score, printed):
    cell = nbf.new_code_cell(
        "run_check_cell(...)",
        execution_count=1,
        metadata={"nbgrader": {"grade": True, "grade_id": grade_id, "points": points}},
    )
    cell.outputs = [
        nbf.new_output("stream", name="stdout", text=printed),
        nbf.new_output("execute_result", data={"text/plain": repr(score)}, execution_count=1),
    ]
    return cell


@pytest.mark.parametrize("fp16_score, status", [(2.0, 0), (1.0, 1)])
def test_notebook_command_treats_pending_checks_as_the_grader_does(monkeypatch, capsys, tmp_path, fp16_score, status):
    """Full marks but for the checks that need a GPU is a success without one (exit 0), and says so."""
    gpu_line = "  [gpu ]     0/3  bf16   bf16 inputs  (0.0 s)\n" + " " * 20 + report.PENDING_TEXT
    nb = nbf.new_notebook(cells=[_cell("04-fp16", 2, fp16_score, "  [pass] ..."), _cell("04-bf16", 3, 0.0, gpu_line)])
    path = tmp_path / "04.ipynb"
    nbformat_write(nb, path)
    monkeypatch.setattr(notebooks, "execute", lambda p, timeout: (nb, None))
    assert notebooks.main([str(path)]) == status
    assert f"Total: {fp16_score:g}/5 (3 of them need a GPU: pending, not run here)" in capsys.readouterr().out


def nbformat_write(nb, path):
    import nbformat

    nbformat.write(nb, path)


def test_readme_states_the_gpu_only_points():
    """README's sentence on GPU-only points matches the grader, exercise by exercise."""
    gpu = {ex.number: sum(c.points for c in ex.checks if c.gpu_only) for ex in EXERCISES}
    gpu = {number: points for number, points in gpu.items() if points}
    total = sum(ex.points for ex in EXERCISES)
    match = re.search(
        r"(\d+) of the (\d+) points are checks that need a GPU \(([^)]*)\)", (ROOT / "README.md").read_text()
    )
    assert match, "README must say how many points need a GPU"
    stated = dict(re.findall(r"(\d\d): (\d+)", match.group(3)))
    assert (float(match.group(1)), float(match.group(2))) == (sum(gpu.values()), total)
    assert {k: float(v) for k, v in stated.items()} == gpu
