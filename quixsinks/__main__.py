"""``python -m quixsinks``: see :mod:`quixsinks.cli`."""

from .cli import main

raise SystemExit(main())
