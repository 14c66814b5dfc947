"""``python -m runtime.cli``: the ``conduit`` command, as tests and scripts without the entry point run it."""

from runtime.cli import main

main()
