"""Importing Quix Streams (a pinned dev dependency) in the tests that compare with it."""

from __future__ import annotations

import contextlib
import importlib
import sys
import warnings
from types import ModuleType


def import_quix(name: str, *, fresh: bool = False) -> ModuleType:
    """Quix Streams' module ``name``, imported without its dependencies' deprecation
    warnings. ``fresh``: imported again, for modules that read the environment into their
    parameters' defaults when imported (the Kinesis sink's ``AWS_*``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.suppress(ImportError):  # it adds an "always" filter when imported
            importlib.import_module("authlib.deprecate")
        warnings.simplefilter("ignore")
        if fresh:
            sys.modules.pop(name, None)
        return importlib.import_module(name)
