"""``python -m torch_gpubpe train|encode`` — see :mod:`torch_gpubpe.cli.main`."""

from torch_gpubpe.cli.main import run

run()
