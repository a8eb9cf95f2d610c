"""Acceptance checks as data, read by the catalog, the plan, the grader and the host alike.

``spec``: which checks an item has (``CheckSpec``, sent with an attempt: no shared files) and what a web check asks
(``WebCheckSpec``); ``result``: what a check concluded (``CheckResult``), shared by every check kind. Two modules,
not one: grading a folder reads results only, and building the spec models would cost every ``fleet import`` its
start-up (tests/harness/cli/test_cli_startup.py).

Running a check is the worker's (``workers/checks/``), on the host (``workers/host/webcheck.py`` for a web page).
"""
