"""The import graph keeps the course's layers apart: student code imports only the student runtime,
common/ never reaches into grader/, nothing imports solutions/ or exercises/ as a module, and no
two modules import each other (directly or through others)."""

import ast
from pathlib import Path

from grader.static import violations

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("common", "grader")


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set:
    """Every module of the course's packages that `path` imports, at any depth of the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found |= {n for n in names if n.split(".")[0] in PACKAGES + ("solutions", "exercises")}
    return found


def _graph() -> dict:
    modules = {_module(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}
    return {name: {m for m in _imports(path) if m in modules and m != name} for name, path in modules.items()}


def test_common_never_imports_the_grader():
    arrows = [
        (m, i) for m, imports in _graph().items() if m.startswith("common") for i in imports if i.startswith("grader")
    ]
    assert not arrows, arrows


def test_nothing_imports_solutions_or_exercises_as_modules():
    arrows = [
        (_module(p), i)
        for package in PACKAGES
        for p in (ROOT / package).rglob("*.py")
        for i in _imports(p)
        if i.split(".")[0] in ("solutions", "exercises")
    ]
    assert not arrows, arrows


def test_student_code_imports_only_the_student_runtime():
    files = [*ROOT.glob("solutions/0[1-7]_*/*.py"), *ROOT.glob("exercises/0[1-7]_*/*.py")]
    assert len(files) == 14
    found = [v for path in files for v in violations(path.read_text(), str(path.relative_to(ROOT)))]
    assert not found, found


def test_no_import_cycles():
    graph = _graph()
    cycles = []

    def visit(node, path):
        for nxt in graph[node]:
            if nxt in path:
                cycles.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in done:
                visit(nxt, path + [nxt])
        done.add(node)

    done = set()
    for start in graph:
        if start not in done:
            visit(start, [start])
    assert not cycles, cycles[:3]


def test_the_checks_load_before_the_interpreter_is_chosen():
    """`--check NAME` reads an exercise's checks before common.env.setup() picks GPU or interpreter:
    loading them must not import triton (which would fix the choice too early)."""
    import subprocess
    import sys

    probe = (
        "import sys\nfrom grader.exercises import EXERCISES\nfor ex in EXERCISES:\n    ex.checks\n"
        "import grader.sandbox, grader.runner\nassert 'triton' not in sys.modules, 'triton imported'\n"
    )
    run = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
