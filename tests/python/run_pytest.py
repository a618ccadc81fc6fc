#!/usr/bin/env python3
"""ctest's runner of one pytest file (python/CMakeLists.txt registers each tests/python/test_*.py).

Exit 77 (ctest: "Skipped", the reason printed) when pytest or numpy cannot be imported, or when
every test of the file was skipped (torch or ../shared absent); otherwise pytest's own status.
"""

import sys

SKIP = 77

try:
    import pytest
except ImportError:
    print(f"skipped: {sys.executable} cannot import pytest (Debian: python3-pytest)")
    sys.exit(SKIP)
try:
    import numpy  # noqa: F401
except ImportError:
    print(f"skipped: {sys.executable} cannot import numpy (Debian: python3-numpy)")
    sys.exit(SKIP)


class Outcomes:
    def __init__(self):
        self.passed = self.skipped = 0

    def pytest_runtest_logreport(self, report):
        if report.when == "call" and report.passed:
            self.passed += 1
        elif report.skipped:
            self.skipped += 1

    def pytest_collectreport(self, report):  # a module skipped as a whole (pytest.importorskip)
        if report.skipped:
            self.skipped += 1


outcomes = Outcomes()
status = pytest.main(["-q", "-rs", "-p", "no:cacheprovider", *sys.argv[1:]], plugins=[outcomes])
if status in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED) and outcomes.passed == 0 and outcomes.skipped > 0:
    print(f"skipped: all {outcomes.skipped} tests of {' '.join(sys.argv[1:])} were skipped (reasons above)")
    sys.exit(SKIP)
sys.exit(int(status))
