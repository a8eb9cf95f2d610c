"""Rename the photos in a folder by the date they were taken.

The date comes from the EXIF DateTimeOriginal tag when the file has one, else from the file's
modification time. New names are YYYY-MM-DD_HH-MM-SS.ext; a name already used gets _1, _2 ...
"""
import argparse
import os
import re
import sys
from datetime import datetime

PHOTO_EXTENSIONS = {".jpg", ".jpeg", ".png", ".heic", ".tif", ".tiff"}
EXIF_DATE = re.compile(rb"(\d{4}):(\d{2}):(\d{2}) (\d{2}):(\d{2}):(\d{2})")


def date_taken(path):
    with open(path, "rb") as f:
        head = f.read(65536)
    match = EXIF_DATE.search(head) if b"Exif" in head else None
    if match:
        try:
            return datetime(*(int(g) for g in match.groups()))
        except ValueError:
            pass
    return datetime.fromtimestamp(os.path.getmtime(path))


def new_names(folder):
    plan, taken = {}, set()
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        ext = os.path.splitext(name)[1].lower()
        if not os.path.isfile(path) or ext not in PHOTO_EXTENSIONS:
            continue
        stem = date_taken(path).strftime("%Y-%m-%d_%H-%M-%S")
        candidate, n = stem + ext, 1
        while candidate in taken or (candidate != name and os.path.exists(os.path.join(folder, candidate))):
            candidate = f"{stem}_{n}{ext}"
            n += 1
        taken.add(candidate)
        plan[name] = candidate
    return plan


def rename_photos(folder, dry_run=False):
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"folder {folder!r} does not exist")
    plan = new_names(folder)
    for old, new in plan.items():
        if old != new and not dry_run:
            os.rename(os.path.join(folder, old), os.path.join(folder, new))
    return plan


def main(argv=None):
    parser = argparse.ArgumentParser(description="Rename the photos in a folder by the date they were taken.")
    parser.add_argument("folder")
    parser.add_argument("--dry-run", action="store_true", help="print the new names, rename nothing")
    args = parser.parse_args(argv)
    try:
        plan = rename_photos(args.folder, args.dry_run)
    except FileNotFoundError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    for old, new in plan.items():
        print(f"{old} -> {new}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
