"""``python -m flownb``: the same as the ``flownb`` command."""

from .cli.entry import main

# Guarded: a worker process spawned by the server re-imports the main module under another name.
if __name__ == "__main__":
    main()
