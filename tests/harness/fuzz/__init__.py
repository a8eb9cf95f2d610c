"""Fuzzing of every input format the harness reads, through the real ``fleet`` entry points."""
