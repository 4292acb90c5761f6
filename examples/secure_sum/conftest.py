"""Lets the tests import ``secure_sum`` from this folder when the package is not installed.

With ``pip install -e examples/secure_sum`` it is importable anyway, and this changes nothing.
"""

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
