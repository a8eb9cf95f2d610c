"""Replay: recorded sessions fed through a guard version offline, and what it decides (docs/replay.md).

``sources`` reads the inputs (a sweep, a folder, a session in any importable format) into ``ReplaySession``s;
``policies`` resolves ``--policy`` (default, a TOML file, ``git:REF``, ``cmd:COMMAND``); ``edits`` applies
counterfactuals; ``engine`` walks one session through one guard; ``differ`` compares two policies' outcomes;
``runner`` does it all in parallel over cores.
"""
