"""`make doctor`: what this environment is, and whether it can run the course."""

import sys

from common import env


def main() -> int:
    missing = env.missing_packages()
    if missing:
        print(env.missing_packages_message(missing, "grader.doctor"))
        return 1
    try:
        mode = env.setup()
        print(f"Mode:     {mode.description}")
        print(f"Versions: {env.versions()}")
        if not mode.gpu:
            env.check_interpreter()
            print("Interpreter: a kernel with a runtime loop bound ran correctly.")
    except env.BrokenEnvironment as exc:
        print(f"BROKEN: {exc}")
        return 1
    try:
        import nbgrader

        print(f"nbgrader: {nbgrader.__version__} (make release / make autograde available)")
    except ImportError:
        print("nbgrader: not installed (only instructors need it: make release / make autograde)")
    print("OK: this environment can grade the course.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
