"""Generates the Spark auto-discovery modules at build time (everything else is in pyproject.toml).

Spark 4 registers the ``DefaultSource`` of every top-level ``pyspark_*`` module, one per
module, so each format name (``postgresql``, ``qs_postgresql``, ...) needs a module of its
own. They are generated from quixsinks/catalogue.py into the wheel; an editable install
(``pip install -e . --config-settings editable_mode=compat``, as ``make install`` does)
gets them in the checkout's root, which that mode puts on ``sys.path`` (git ignores them).
"""

from __future__ import annotations

import os
import runpy

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
CATALOGUE = runpy.run_path(os.path.join(HERE, "quixsinks", "catalogue.py"))


class BuildPyWithDiscovery(build_py):
    """build_py, plus one ``pyspark_quixsinks_<format>.py`` per format name."""

    def run(self) -> None:
        super().run()
        # an editable build writes generated files in place (setuptools' rule for build_py)
        self._generate(HERE if self.editable_mode else self.build_lib)

    def _generate(self, folder: str) -> list[str]:
        os.makedirs(folder, exist_ok=True)
        written = []
        for module, format_name in CATALOGUE["discovery_modules"]().items():
            path = os.path.join(folder, f"{module}.py")
            with open(path, "w", encoding="utf-8") as out:
                out.write(CATALOGUE["discovery_module_source"](format_name))
            written.append(path)
        return written

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        modules = [
            os.path.join(self.build_lib, f"{m}.py") for m in CATALOGUE["discovery_modules"]()
        ]
        return [*super().get_outputs(include_bytecode), *modules]


setup(cmdclass={"build_py": BuildPyWithDiscovery})
