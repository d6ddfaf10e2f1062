"""Your job modules: the place to write the handlers your stack runs.

Put a module (or a package) in this folder, ``layers/pgdrain/jobs/``, and ``sam build`` ships
it in the pgdrain layer; both functions load every module here, because the default
``PGDRAIN_JOBS`` (the template's ``JobModules``) is ``jobs``, this package, which imports all
of its modules in name order. A module whose name starts with ``_`` is not loaded (keep
helpers there). ``echo.py`` is the example: replace it or keep it to check a deploy.

Import heavy things inside the handlers: the enqueue function loads these modules too, only
to learn the job types.
"""

from __future__ import annotations

import importlib
import pkgutil


def _load_every_module() -> list[str]:
    names = sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
    for name in names:
        importlib.import_module(f"{__name__}.{name}")
    return names


MODULES = _load_every_module()
"""The modules loaded, in order."""
