"""A dishonest or broken student cannot change a grade: each attack is a small submission of
exercise 02 (the instructor's softmax plus the attack, triggered by the inputs of the check
`large_values`, shape [4, 300]). Each must earn 0 on that check with a message that says what
happened, while the next check (`negative_infinity`) is still graded and passes; no process may be left
behind and no file outside the student's copy may change.

Most attacks use what graded code may not contain (grader.static refuses it before anything
runs); they are run with those rules switched off too, to show that the sandbox alone holds.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import grader.runner
from common import env
from grader import zygote
from grader.exercises import find
from grader.runner import ROOT, grade_exercise
from grader.sandbox import isolation

SOLUTION = (ROOT / "solutions" / "02_safe_softmax" / "safe_softmax.py").read_text()
ATTACKED, NEXT = "large_values", "negative_infinity"
LIMIT = 60 if env.setup().gpu else 20  # seconds per check: on a GPU a fresh process compiles its kernels again
ISOLATED = isolation() == "namespaces"
needs_sandbox = pytest.mark.skipif(
    not ISOLATED and not os.environ.get("COURSE_REQUIRE_SANDBOX"),
    reason="the file-system attacks are stopped by the sandbox, which needs root and Linux namespaces",
)


def submission(tmp_path: Path, attack: str, at_import: str = "") -> Path:
    """A course folder whose 02 is the solution with `attack` run on the [4, 300] input."""
    folder = tmp_path / "course" / "02_safe_softmax"
    folder.mkdir(parents=True)
    body = textwrap.indent(textwrap.dedent(attack).strip(), " " * 8)
    (folder / "safe_softmax.py").write_text(
        textwrap.dedent(at_import) + SOLUTION + "\n\nhonest_softmax = softmax\n\n\ndef softmax(x):\n"
        f"    if tuple(x.shape) == (4, 300):\n{body}\n    return honest_softmax(x)\n"
    )
    return folder.parent


def grade(course: Path, static_rules=True, limit=LIMIT, monkeypatch=None):
    if not static_rules:
        monkeypatch.setattr(grader.runner, "_refused", lambda exercise, target: "")
    results = {r.name: r for r in grade_exercise(find("02"), course, seed=11, time_limit=limit, only=(ATTACKED, NEXT))}
    assert results[NEXT].status == "passed", results[NEXT].message  # graded after the attack
    return results[ATTACKED]


def repository_state() -> str:
    """A digest of the grader's and the solutions' files (what a student would plant or change)."""
    digest = hashlib.sha256()
    for path in sorted([*(ROOT / "grader").rglob("*"), *(ROOT / "solutions").rglob("*")]):
        if path.is_file():
            digest.update(str(path).encode() + path.read_bytes())
    return digest.hexdigest()


def processes(uid=None, marker: bytes = None) -> list:
    """Processes run by the user `uid`, or whose command line holds `marker`."""
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            owner = next(int(line.split()[1]) for line in status.read_text().splitlines() if line.startswith("Uid:"))
            cmdline = (status.parent / "cmdline").read_bytes()
        except (OSError, StopIteration):
            continue
        if owner == uid or (marker and marker in cmdline):
            found.append(status.parent.name)
    return found


# ----------------------------------------------------------------------------- only kernels compute
@pytest.mark.parametrize(
    "answer,op",
    [
        ("torch.softmax(x.float(), -1).to(x.dtype)", "torch.softmax"),
        ("(x.float().exp() / x.float().exp().sum(-1, keepdim=True)).to(x.dtype)", "torch.Tensor.exp"),
        (
            "torch.nn.functional.scaled_dot_product_attention(x[None, None], x[None, None], x[None, None])[0, 0]",
            "scaled_dot_product_attention",
        ),
    ],
)
def test_a_pytorch_answer_passed_through_a_kernel_earns_nothing(tmp_path, answer, op):
    course = submission(tmp_path, f"return honest_softmax(x) * 0 + {answer}")
    result = grade(course)
    assert result.earned == 0 and op in result.message and "outside a Triton kernel" in result.message


# The answer PyTorch computes, per exercise: the attack returns it after launching the honest kernel.
TORCH_ANSWERS = {
    "01": ("matmul", "(a.float() @ b.float()).to(a.dtype)", "a, b"),
    "03": ("online_softmax", "(torch.softmax(x.float(), -1).to(x.dtype), torch.logsumexp(x.float(), -1))", "x"),
    "04": (
        "flash_attention_forward",
        "(torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, "
        "scale=sm_scale), honest(q, k, v, causal, sm_scale)[1])",
        "q, k, v, causal=False, sm_scale=None",
    ),
    "05": ("attention_backward_preprocess", "(o.float() * do.float()).sum(-1)", "o, do"),
    "06": (
        "attention_backward_dkdv",
        "torch_grads(q, k, v, do, causal, sm_scale)[1:]",
        "q, k, v, do, lse, delta, causal=False, sm_scale=None",
    ),
    "07": (
        "attention_backward_dq",
        "torch_grads(q, k, v, do, causal, sm_scale)[0]",
        "q, k, v, do, lse, delta, causal=False, sm_scale=None",
    ),
}
TORCH_GRADS = """
def torch_grads(q, k, v, do, causal, sm_scale):
    leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
    o = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=causal, scale=sm_scale)
    o.backward(do.float())
    return tuple(t.grad.to(q.dtype) for t in leaves)
"""


@pytest.mark.parametrize("number", TORCH_ANSWERS)
def test_every_exercise_refuses_a_pytorch_answer(tmp_path, number):
    exercise = find(number)
    name, answer, params = TORCH_ANSWERS[number]
    for ex in ("04_flash_forward", "05_backward_preprocess", "06_backward_dkdv", exercise.folder):
        shutil.copytree(ROOT / "solutions" / ex, tmp_path / ex, dirs_exist_ok=True)
    module = tmp_path / exercise.folder / f"{exercise.module}.py"
    arguments = ", ".join(p.split("=")[0] for p in params.split(", "))
    module.write_text(
        module.read_text() + TORCH_GRADS + f"\n\nhonest = {name}\n\n\ndef {name}({params}):\n"
        f"    honest({arguments})\n    return {answer}\n"
    )
    first = exercise.checks[0].name
    (result,) = grade_exercise(exercise, tmp_path, seed=11, time_limit=LIMIT, only=(first,))
    assert result.earned == 0 and "outside a Triton kernel" in result.message, result.message


def test_a_tensor_subclass_cannot_fake_equality(tmp_path, monkeypatch):
    course = submission(
        tmp_path,
        """
        class Liar(torch.Tensor):
            @classmethod
            def __torch_function__(cls, func, types, args=(), kwargs=None):
                return torch.zeros(())
        return torch.empty_like(x).as_subclass(Liar)
    """,
    )
    assert grade(course).earned == 0
    result = grade(course, static_rules=False, monkeypatch=monkeypatch)
    assert result.earned == 0 and result.status == "failed"  # only numbers reached the grader


GRADER_MODULES = ["common.reference", "common.inputs", "grader.core", "grader.checks"]


@pytest.mark.parametrize("module", GRADER_MODULES)
def test_importing_the_grader_or_references_is_refused(tmp_path, module):
    course = submission(tmp_path, "return honest_softmax(x)", at_import=f"import {module}\n")
    results = grade_exercise(find("02"), course, seed=11, time_limit=LIMIT, only=(ATTACKED, NEXT))
    assert all(r.earned == 0 and f"`import {module}` is not allowed" in r.message for r in results)


@needs_sandbox
@pytest.mark.parametrize("module", GRADER_MODULES)
def test_the_grader_and_references_are_absent_from_the_sandbox(tmp_path, monkeypatch, module):
    course = submission(tmp_path, "return honest_softmax(x)", at_import=f"import {module}\n")
    monkeypatch.setattr(grader.runner, "_refused", lambda exercise, target: "")
    results = grade_exercise(find("02"), course, seed=11, time_limit=LIMIT, only=(ATTACKED, NEXT))
    assert all(r.earned == 0 and "ModuleNotFoundError" in r.message for r in results), [r.message for r in results]


def test_patching_torch_in_the_student_process_changes_nothing_here(tmp_path, monkeypatch):
    course = submission(
        tmp_path,
        "honest_softmax(x)\nreturn torch.empty_like(x)",
        at_import="""
        import torch
        torch.allclose = lambda *a, **k: True
        torch.Tensor.__sub__ = lambda self, other: torch.zeros_like(self)
        torch.isnan = lambda t: torch.zeros_like(t, dtype=torch.bool)
    """,
    )
    result = grade(course, static_rules=False, monkeypatch=monkeypatch)
    assert result.earned == 0 and "NaN" in result.message


@pytest.mark.parametrize(
    "patch", ["torch.cuda.max_memory_allocated = lambda *a: 0", "triton.testing.do_bench = None", "del torch.allclose"]
)
def test_monkeypatching_is_refused(tmp_path, patch):
    course = submission(tmp_path, "return honest_softmax(x)", at_import=f"import torch\nimport triton\n{patch}\n")
    results = grade_exercise(find("02"), course, seed=11, time_limit=LIMIT, only=(ATTACKED, NEXT))
    assert all(r.earned == 0 and "monkeypatching" in r.message for r in results), [r.message for r in results]


def test_patching_the_student_runtime_is_refused(tmp_path):
    """common.harness records what a call did (kernels launched, PyTorch work, peak memory) in the
    student's process: graded code cannot reach it to rewrite the record."""
    course = submission(tmp_path, "common.harness.invoke = None\nreturn honest_softmax(x)", at_import="import common\n")
    results = grade_exercise(find("02"), course, seed=11, time_limit=LIMIT, only=(ATTACKED, NEXT))
    assert all(r.earned == 0 and "the attribute `.harness` is not allowed" in r.message for r in results)


@pytest.mark.skipif(not env.setup().gpu, reason="04's memory check runs on a GPU only")
def test_patching_torch_cuda_hides_no_memory(tmp_path, monkeypatch):
    """A forward that materialises N x N scores and patches torch.cuda's memory statistics to hide
    them still fails 04's memory check, with the static rules off too: the allocator is read
    through torch._C, which graded code cannot reach."""
    from tests.mutants import mutants_of

    exercise = find("04")
    shutil.copytree(ROOT / "solutions", tmp_path, dirs_exist_ok=True)
    next(m for m in mutants_of(exercise.folder) if m.name == "scores_materialised").plant(tmp_path, exercise)
    module = tmp_path / exercise.folder / f"{exercise.module}.py"
    module.write_text(
        "import torch\n"
        "torch.cuda.max_memory_allocated = lambda *a, **k: 0\n"
        "torch.cuda.memory_allocated = lambda *a, **k: 0\n"
        "torch.cuda.memory_stats = lambda *a, **k: {}\n"
        "torch.cuda.reset_peak_memory_stats = lambda *a, **k: None\n" + module.read_text()
    )
    monkeypatch.setattr(grader.runner, "_refused", lambda exercise, target: "")
    (result,) = grade_exercise(exercise, tmp_path, seed=11, time_limit=300, only=("memory_linear",))
    assert result.earned == 0 and "N x N" in result.message, result.message


# ----------------------------------------------------------------------------- faults
FORGE = """
import os
for fd in range(3, 256):
    try:
        os.write(fd, {message})
    except OSError:
        pass
while True:
    pass
"""


@pytest.mark.parametrize(
    "attack,says",
    [
        ("import sys\nsys.exit(0)", "SystemExit"),
        ("raise SystemExit(0)", "SystemExit"),
        ("raise KeyboardInterrupt", "KeyboardInterrupt"),
        ("import os\nos._exit(0)", "exited (status 0)"),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", "SIGSEGV"),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", "SIGKILL"),
        (FORGE.format(message="b'\\xff' * 64"), "protocol"),
        (FORGE.format(message="(10).to_bytes(8, 'little') + (0).to_bytes(8, 'little') + b'{\"ok\": tru'"), "protocol"),
        ("while True:\n    print('x' * 1000)", "File too large"),
        ("while True:\n    pass", f"timed out after {LIMIT} s during this call"),
    ],
)
def test_exits_signals_and_broken_messages_cost_one_check(tmp_path, monkeypatch, attack, says):
    result = grade(submission(tmp_path, attack), static_rules=False, limit=LIMIT, monkeypatch=monkeypatch)
    assert result.earned == 0 and says in result.message, result.message


@needs_sandbox
def test_a_fork_bomb_is_capped(tmp_path, monkeypatch):
    course = submission(
        tmp_path,
        """
        import os, time
        while True:
            if os.fork() == 0:
                time.sleep(600)
    """,
    )
    monkeypatch.setattr(grader.runner, "_refused", lambda exercise, target: "")
    # only the attacked check: its sleeping children stay until the process ends, and a GPU's compiler
    # needs processes of its own for the next check
    (result,) = grade_exercise(find("02"), course, seed=11, time_limit=LIMIT, only=(ATTACKED,))
    assert result.earned == 0 and "Resource temporarily unavailable" in result.message, result.message


def test_a_hang_at_import_is_charged_once(tmp_path, monkeypatch):
    course = submission(tmp_path, "pass", at_import="while True:\n    pass\n")
    monkeypatch.setattr(grader.runner, "_refused", lambda exercise, target: "")
    start = time.monotonic()
    results = grade_exercise(find("02"), course, seed=11, time_limit=8)
    assert time.monotonic() - start < 2 * 8
    assert all(r.earned == 0 and "timed out after 8 s during importing your module" in r.message for r in results)


def test_an_exit_at_import_fails_every_check_with_its_reason(tmp_path, monkeypatch):
    course = submission(tmp_path, "pass", at_import="import sys\nsys.exit(3)\n")
    monkeypatch.setattr(grader.runner, "_refused", lambda exercise, target: "")
    results = grade_exercise(find("02"), course, seed=11, time_limit=LIMIT)
    assert all(r.earned == 0 and "SystemExit" in r.message for r in results), [r.message for r in results]


# ----------------------------------------------------------------------------- nothing to read or write
@needs_sandbox
@pytest.mark.parametrize(
    "attack",
    [
        f"open({str(ROOT / 'grader' / 'core.py')!r}, 'a').write('\\nimport os\\n')",
        f"import os\nos.makedirs({str(ROOT / 'grader' / '__pycache__')!r}, exist_ok=True)\n"
        f"open({str(ROOT / 'grader' / '__pycache__' / 'core.cpython-311.pyc')!r}, 'wb').write(b'x')",
        f"open({str(ROOT / 'solutions' / '02_safe_softmax' / 'safe_softmax.py')!r}, 'w')"
        ".write('def softmax(x):\\n    return x\\n')",
    ],
)
def test_the_course_files_are_out_of_reach(tmp_path, monkeypatch, attack):
    before = repository_state()
    result = grade(submission(tmp_path, attack), static_rules=False, monkeypatch=monkeypatch)
    assert result.earned == 0 and ("FileNotFoundError" in result.message or "PermissionError" in result.message)
    assert repository_state() == before


@needs_sandbox
def test_a_solution_cannot_be_read_and_leaked_through_a_message(tmp_path, monkeypatch):
    solution = ROOT / "solutions" / "02_safe_softmax" / "safe_softmax.py"
    course = submission(tmp_path, f"raise RuntimeError(open({str(solution)!r}).read())")
    result = grade(course, static_rules=False, monkeypatch=monkeypatch)
    assert result.earned == 0 and "FileNotFoundError" in result.message and "BEGIN SOLUTION" not in result.message


@needs_sandbox
def test_the_seed_and_the_results_file_are_out_of_reach(tmp_path):
    """Through the command line: the student's code looks for the parent's arguments (the seed, the
    --json path) in /proc, starts a detached process to rewrite results.json after the grader has
    finished, and writes to the grader's stdout."""
    out = tmp_path / "results.json"
    course = submission(
        tmp_path,
        f"""
        import os, subprocess
        seen = [open(f'/proc/{{p}}/cmdline', 'rb').read() for p in os.listdir('/proc') if p.isdigit()]
        if any(b'--json' in s or b'--seed' in s for s in seen):
            raise RuntimeError('found the grader')
        subprocess.Popen(['sh', '-c', 'sleep 3; echo forged > {out}'], start_new_session=True)
        os.write(1, b'Total: 10/10 (forged)')
        return honest_softmax(x)
    """,
    )
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent("""
        import sys
        import grader.runner
        grader.runner._refused = lambda exercise, target: ""
        from grader.__main__ import main
        sys.exit(main(sys.argv[1:]))
    """),
            "02",
            "--target",
            str(course),
            "--seed",
            "11",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    assert "forged" not in run.stdout and "found the grader" not in run.stdout
    time.sleep(5)  # the detached process would have written by now
    data = json.loads(out.read_text())
    assert data["score"] == 10 and "forged" not in out.read_text()
    assert "Total: 10/10" in run.stdout  # results.json says what the report printed
    assert not processes(marker=b"echo forged")


@pytest.mark.parametrize("level", ["namespaces", "process"])
def test_no_process_survives_grading(tmp_path, monkeypatch, level):
    """Detached processes die with the student's process, in the sandbox and without it."""
    import grader.sandbox

    if level == "namespaces" and not ISOLATED:
        pytest.skip("the sandbox needs root and Linux namespaces")
    monkeypatch.setattr(grader.sandbox, "isolation", lambda: level)
    marker = f"sleep 31{len(level)}"
    course = submission(
        tmp_path,
        f"""
        import os, subprocess
        subprocess.Popen(['sh', '-c', '{marker}'], start_new_session=True)
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execvp('sh', ['sh', '-c', '{marker}; :'])
            os._exit(0)
        return honest_softmax(x)
    """,
    )
    grade(course, static_rules=False, monkeypatch=monkeypatch)
    assert not processes(marker=marker.encode())


def test_the_student_process_is_told_no_seed(tmp_path, monkeypatch):
    """The seed never reaches the student's side: not in the zygote's arguments or environment, not
    in what each forked student process is told."""
    seen = []
    real_popen, real_fork = subprocess.Popen, zygote.Zygote.fork

    def recording_popen(cmd, *args, **kwargs):
        seen.append(json.dumps([list(cmd), kwargs.get("env")]))
        return real_popen(cmd, *args, **kwargs)

    def recording_fork(self, request, fds):
        seen.append(json.dumps(request))
        return real_fork(self, request, fds)

    monkeypatch.setenv("COURSE_GRADING_SEED", "8675309")
    monkeypatch.setattr(subprocess, "Popen", recording_popen)
    monkeypatch.setattr(zygote.Zygote, "fork", recording_fork)
    monkeypatch.setattr(zygote, "RUNNING", None)  # a zygote of its own, started here
    course = submission(tmp_path, "return honest_softmax(x)")
    (result,) = grade_exercise(find("02"), course, seed=8675309, time_limit=LIMIT, only=(NEXT,))
    assert result.status == "passed" and len(seen) == 2  # the zygote started, one process forked
    assert all("8675309" not in told and "COURSE_GRADING_SEED" not in told for told in seen)


def test_ci_runs_the_sandbox():
    if not os.environ.get("COURSE_REQUIRE_SANDBOX"):
        pytest.skip("COURSE_REQUIRE_SANDBOX=1 (set in CI) requires the sandbox")
    assert ISOLATED, "COURSE_REQUIRE_SANDBOX is set but student code cannot be isolated here (root and namespaces)"
