"""What graded code may contain, checked on the grader's side before any of it runs.

An exercise file is kernels and the host code that launches them: it imports Triton, PyTorch and
the student runtime (common.env, common.shapes, common.tuning, common.loader), and nothing that
reaches the machine, the interpreter's internals or the grader; it assigns to nothing it imported
(no monkeypatching). The sandbox (grader.sandbox) keeps student code away from the grader's files
and memory whatever it contains; these rules keep the student's own process honest, so that the
record of what a call computed and measured (common.harness) cannot be switched off or rewritten
from the student's file.
"""

import ast

BASE_IMPORTS = frozenset(
    {
        "__future__",
        "math",
        "functools",
        "itertools",
        "typing",
        "dataclasses",
        "torch",
        "triton",
        "triton.language",
        "common",
        "common.env",
        "common.shapes",
        "common.tuning",
        "common.loader",
    }
)
FORBIDDEN_NAMES = frozenset(
    {
        "eval",
        "exec",
        "compile",
        "open",
        "__import__",
        "globals",
        "locals",
        "vars",
        "getattr",
        "setattr",
        "delattr",
        "breakpoint",
        "input",
        "help",
        "exit",
        "quit",
        "memoryview",
        "__builtins__",
    }
)
FORBIDDEN_ATTRIBUTES = frozenset(
    {
        "os",
        "sys",
        "subprocess",
        "builtins",
        "ctypes",
        "importlib",
        "inspect",
        "gc",
        "ops",
        "library",
        "overrides",
        "modules",
        "system",
        "popen",
        "f_back",
        "f_globals",
        "f_locals",
        "tb_frame",
        "gi_frame",
        "cr_frame",
        "run_path",
        # the student runtime's own modules (common.harness records what a call did and measured)
        "harness",
        "serve",
        "wire",
        "fixtures",
        "reference",
    }
)
ALLOWED_DUNDERS = frozenset({"__name__", "__doc__", "__init__", "__file__"})


def violations(source: str, filename: str, extra_imports=()) -> list:
    """'file line N: why' for each construct graded code may not contain (empty when it is clean).
    A syntax error is left to the import, which reports it with its line."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    allowed = BASE_IMPORTS | set(extra_imports)
    imported = _imported_names(tree)
    found = []

    def refuse(node, why):
        found.append(f"{filename} line {getattr(node, 'lineno', '?')}: {why}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name not in allowed:
                    refuse(node, f"`import {alias.name}` is not allowed in graded code")
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            names = [a.name for a in node.names]
            if "*" in names:
                refuse(node, f"`from {module} import *` is not allowed: import the names you use")
            elif module not in allowed and not all(f"{module}.{n}" in allowed for n in names):
                refuse(node, f"`from {module} import {', '.join(names)}` is not allowed in graded code")
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            refuse(node, f"`{node.id}` is not allowed in graded code")
        elif isinstance(node, ast.Attribute) and _forbidden_attribute(node.attr):
            refuse(node, f"the attribute `.{node.attr}` is not allowed in graded code")
        for target in _assigned(node):
            if _root_name(target) in imported:
                refuse(
                    node,
                    f"`{ast.unparse(target)}` changes something imported (monkeypatching), for all the code in "
                    "your process: not allowed in graded code",
                )
    return found


def _imported_names(tree) -> set:
    """The names that import statements bind in this file (torch, tl, autotune, ...)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names |= {a.asname or a.name for a in node.names}
    return names


def _assigned(node) -> list:
    """The attribute and item targets a statement assigns or deletes (x.y = ..., x[i] += ..., del x.y)."""
    if isinstance(node, (ast.Assign, ast.Delete)):
        targets = node.targets
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    else:
        return []
    flat = []
    while targets:
        target = targets.pop()
        if isinstance(target, (ast.Tuple, ast.List)):
            targets.extend(target.elts)
        elif isinstance(target, (ast.Attribute, ast.Subscript)):
            flat.append(target)
    return flat


def _root_name(target):
    while isinstance(target, (ast.Attribute, ast.Subscript)):
        target = target.value
    return target.id if isinstance(target, ast.Name) else None


def _forbidden_attribute(name: str) -> bool:
    if name in ALLOWED_DUNDERS:
        return False
    return name.startswith("_") or name in FORBIDDEN_ATTRIBUTES


def explain(found: list) -> str:
    """The message for a file that breaks the rules: all the checks of the exercise score 0."""
    shown = "\n".join(f"  {line}" for line in found[:5]) + ("\n  ..." if len(found) > 5 else "")
    return (
        "graded code may only import torch, triton, math and the course's student runtime (common.env, "
        "common.shapes, common.tuning, common.loader), and may not reach into Python's or PyTorch's "
        f"internals; your file was not run:\n{shown}"
    )
