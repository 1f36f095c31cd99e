"""Importing a course module by path: the student's exercise files, from exercises/, solutions/,
a submission, or the sandbox the grader builds. Exercise 07 reaches the student's own 04-06 this
way (`load_sibling(__file__, "04_flash_forward", "flash_forward")`).

In a notebook, a sibling exercise is the notebook `<folder>/<folder>.ipynb`: its student code
cells are loaded as one module, registered with linecache so Triton can read kernel sources.
"""

import importlib.util
import json
import linecache
import sys
import types
from pathlib import Path


class ImportFailed(Exception):
    """A module could not be imported; the message says why and where."""


def load_module(path: Path):
    path = Path(path).resolve()
    if not path.is_file():
        raise ImportFailed(f"{path.parent.name}/{path.name} does not exist")
    spec = importlib.util.spec_from_file_location(_module_name(path), path)
    assert spec is not None and spec.loader is not None  # a .py file always has a spec with a loader
    module = importlib.util.module_from_spec(spec)
    return _execute(module, lambda: spec.loader.exec_module(module), path)


def load_notebook(path: Path, module: str):
    """The student code cells of a notebook (every code cell but the set-up and the tests) as a module."""
    path = Path(path).resolve()
    source = "\n\n\n".join(notebook_code(json.loads(path.read_text()))) + "\n"
    filename = str(path.with_name(f"{module}.py"))
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # no mtime: kept
    mod = types.ModuleType(_module_name(path))
    mod.__file__ = filename
    return _execute(mod, lambda: exec(compile(source, filename, "exec"), mod.__dict__), path)


def notebook_code(notebook: dict) -> list:
    """The student's code cells of a notebook (JSON), without the set-up and test cells."""

    def student_cell(cell):
        meta = cell.get("metadata", {}).get("nbgrader")
        return cell.get("cell_type") == "code" and (meta is None or meta.get("solution", False))

    return ["".join(c.get("source", "")) for c in notebook.get("cells", []) if student_cell(c)]


def load_sibling(anchor: str, folder: str, module: str):
    """The module `folder/module.py` (or the notebook `folder/folder.ipynb`) next to the exercise
    folder holding the file `anchor`."""
    path = Path(anchor).resolve().parent.parent / folder / f"{module}.py"
    notebook = path.with_name(f"{folder}.ipynb")
    if not path.exists() and notebook.exists():
        return load_notebook(notebook, module)
    return load_module(path)


_course = None  # the folder holding the exercise folders being graded


def use_course(path) -> None:
    """Set the course folder that load_exercise reads (the sandbox's copy, a notebook's parent folder)."""
    global _course
    _course = Path(path)


def load_exercise(folder: str):
    """The student's module of exercise `folder` ("04_flash_forward") in the course being graded:
    the folder's .py file, or its notebook. Imported once."""
    if folder in _loaded:
        return _loaded[folder]
    if _course is None:
        raise ImportFailed(f"cannot find your {folder}: no course folder is set (common.loader.use_course)")
    files = sorted((_course / folder).glob("*.py"))
    notebook = _course / folder / f"{folder}.ipynb"
    if files:
        module = load_module(files[0])
    elif notebook.is_file():
        module = load_notebook(notebook, folder)
    else:
        raise ImportFailed(f"{folder}/ holds no exercise file next to this one")
    _loaded[folder] = module
    return module


_loaded: dict[str, types.ModuleType] = {}


def _module_name(path: Path) -> str:
    return f"student_{path.parent.name}_{path.stem}_{abs(hash(str(path)))}"


def _execute(module, run, path: Path):
    sys.modules[module.__name__] = module  # @triton.jit needs the module importable to read its source
    try:
        run()
    except SyntaxError as exc:
        raise ImportFailed(f"{path.parent.name}/{path.name} line {exc.lineno}: SyntaxError: {exc.msg}") from exc
    except Exception as exc:  # noqa: BLE001 - module-level student code may raise anything
        raise ImportFailed(f"importing {path.parent.name}/{path.name} raised {type(exc).__name__}: {exc}") from exc
    return module
