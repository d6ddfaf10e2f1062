"""``python -m pgdrain`` is the ``pgdrain`` command."""

import sys

from .cli import main

sys.exit(main())
