"""``python -m torch_gpubpe train|encode`` — see :mod:`torch_gpubpe.cli`."""

import sys

from .cli import main

sys.exit(main())
