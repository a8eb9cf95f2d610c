"""``python -m harness.cli``: the ``fleet`` command, where its console script is not installed."""

from harness.cli import main

main()
