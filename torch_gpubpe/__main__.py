"""``python -m torch_gpubpe train|encode`` — see :mod:`torch_gpubpe.cli`."""

from .cli import run

run()
