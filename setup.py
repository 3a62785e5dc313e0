"""The package list, which pyproject.toml cannot state with discovery: `search` and `trainer` as
found, and the top-level migrations/ installed inside `search` as `search.db.migrations` (mapped
by pyproject's ``[tool.setuptools.package-dir]``). Everything else is in pyproject.toml."""

from setuptools import find_packages, setup

setup(
    packages=[
        *find_packages(include=["search", "search.*", "trainer", "trainer.*"]),
        *(f"search.db.{name}" for name in find_packages(include=["migrations", "migrations.*"])),
    ]
)
