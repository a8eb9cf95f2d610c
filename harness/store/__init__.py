"""The result store: ``runs/<sweep>/...`` on disk plus ``runs/index.sqlite`` for queries (docs/store.md).

One face over small modules, each with one concern:

- ``store.py``      ``Store``: the results directory, reading a sweep (snapshot + journal), checked paths, the lock
- ``writer.py``     ``SweepWriter``: every change to a sweep's state, attempts and grades recorded, ``write_file``
- ``journal.py``    the journal: appending, replaying over the snapshot, the torn tail a crash leaves
- ``index.py``      the SQLite index: schema, connection, each table's rows
- ``names.py``      names: stored ids as path parts, artifact names as file names (``storable_names``)
- ``overrides.py``  ``override_grade``: a reviewer's grade of a recorded attempt, under the writer's lock
- ``prune.py``      ``fleet prune``: removing old sweeps

Below it: the grade files (``harness.grading.gradefiles``, written when an attempt is recorded with its grade) and
the atomic writes and disk flushes (``harness.core.files``).
"""

from __future__ import annotations

from harness.store.journal import JOURNAL
from harness.store.overrides import override_grade
from harness.store.store import Store
from harness.store.writer import Graded, SweepWriter, write_file

__all__ = ["Store", "SweepWriter", "Graded", "JOURNAL", "write_file", "override_grade"]
