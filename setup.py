"""Ships the pages and the model repository inside the wheel.

``templates/``, ``static/`` and ``models/`` live beside ``attnscope/`` in the checkout (where the
editable install reads them); a wheel (``pip install .``) carries copies at ``attnscope/shipped/<name>``,
which ``attnscope.config.shipped`` finds, so an installed ``attnscope serve`` serves them from any
directory. Everything else is in pyproject.toml."""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SHIPPED = ("static", "templates", "models")  # attnscope.config.SHIPPED
LEFT_OUT = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")


class BuildWithShipped(build_py):
    """build_py, then copies of the shipped folders into the built package (not for an
    editable install, which reads the checkout's own)."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for name in SHIPPED:
            source = ROOT / name
            if source.is_dir():
                target = Path(self.build_lib) / "attnscope" / "shipped" / name
                shutil.rmtree(target, ignore_errors=True)  # no stale files from an earlier build
                shutil.copytree(source, target, ignore=LEFT_OUT)


setup(cmdclass={"build_py": BuildWithShipped})
