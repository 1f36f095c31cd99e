import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from common import env  # noqa: E402

MODE = env.setup()  # before anything imports triton
