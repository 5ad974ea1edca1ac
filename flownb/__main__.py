"""``python -m flownb``: the same as the ``flownb`` command."""

from .cli import main

main()
