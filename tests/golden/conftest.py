"""The golden folders hold the files real runs wrote, agents' workspaces included: a ``test_*.py`` an
agent wrote there is evidence, not one of our tests, so pytest must not collect it."""

collect_ignore_glob = ["v[0-9]*"]
