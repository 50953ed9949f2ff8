"""The README's Python examples run as written."""

import re

from conftest import REPO


def python_blocks():
    text = (REPO / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_the_readme_has_its_python_examples():
    assert len(python_blocks()) >= 2


def test_every_python_example_of_the_readme_runs():
    for block in python_blocks():
        exec(compile(block, "README.md", "exec"), {})
