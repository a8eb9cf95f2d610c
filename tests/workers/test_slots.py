"""Slot leases name their slot, so a new holder can end what the slot's earlier holder left on the host."""

from __future__ import annotations

from pathlib import Path

from workers.slots import FileSlots


def test_file_slots_name_each_slot_apart(tmp_path: Path) -> None:
    slots = FileSlots(tmp_path / "slots")
    a = slots.try_acquire("tower1", 2)
    b = slots.try_acquire("tower1", 2)
    assert a is not None and b is not None and slots.try_acquire("tower1", 2) is None
    assert a.slot == f"file:{(tmp_path / 'slots' / 'tower1.0.lock').resolve()}"
    assert b.slot == f"file:{(tmp_path / 'slots' / 'tower1.1.lock').resolve()}"
    a.release()
    again = slots.try_acquire("tower1", 2)
    assert again is not None and again.slot == a.slot  # the same slot, taken by its next holder
    # Another slots folder (another coordinator's embedded queue) is another slot, though its index is the same.
    other = FileSlots(tmp_path / "other").try_acquire("tower1", 1)
    assert other is not None and other.slot != a.slot
