"""The README's "Testing your jobs" example, run as written: a user's test file, in a pytest
run of its own with pgdrain's plugin (in a subprocess: its @pgdrain.job registers in pgdrain's
global registry there, not in this suite's)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.db

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
EXAMPLE = re.search(r"<!-- testing-example -->\n```python\n(.*?)```", README, re.DOTALL)[1]


def test_the_readme_testing_example_passes(pytester):
    pytester.makepyfile(test_signup=EXAMPLE)
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)
