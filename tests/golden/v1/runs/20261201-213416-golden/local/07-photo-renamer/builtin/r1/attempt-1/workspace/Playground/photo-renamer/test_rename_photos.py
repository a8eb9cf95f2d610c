import os
import tempfile
import unittest
from datetime import datetime

from rename_photos import date_taken, rename_photos


def make_photo(folder, name, exif_date=None, mtime=None):
    path = os.path.join(folder, name)
    data = b"\xff\xd8\xff\xe1Exif\x00\x00" + (exif_date.encode() + b"\x00" if exif_date else b"") + b"\xff\xd9"
    with open(path, "wb") as f:
        f.write(data)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


class RenamePhotosTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.folder = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def test_exif_date_is_used(self):
        path = make_photo(self.folder, "IMG_0001.jpg", "2021:05:06 07:08:09")
        self.assertEqual(date_taken(path), datetime(2021, 5, 6, 7, 8, 9))

    def test_modification_time_without_exif_date(self):
        path = make_photo(self.folder, "scan.png", mtime=datetime(2020, 1, 2, 3, 4, 5).timestamp())
        self.assertEqual(date_taken(path), datetime(2020, 1, 2, 3, 4, 5))

    def test_renames_and_numbers_clashes(self):
        make_photo(self.folder, "a.jpg", "2021:05:06 07:08:09")
        make_photo(self.folder, "b.JPG", "2021:05:06 07:08:09")
        rename_photos(self.folder)
        self.assertEqual(sorted(os.listdir(self.folder)), ["2021-05-06_07-08-09.jpg", "2021-05-06_07-08-09_1.jpg"])

    def test_dry_run_and_other_files_are_left_alone(self):
        make_photo(self.folder, "a.jpg", "2021:05:06 07:08:09")
        with open(os.path.join(self.folder, "notes.txt"), "w") as f:
            f.write("not a photo")
        self.assertEqual(rename_photos(self.folder, dry_run=True), {"a.jpg": "2021-05-06_07-08-09.jpg"})
        self.assertEqual(sorted(os.listdir(self.folder)), ["a.jpg", "notes.txt"])

    def test_missing_folder(self):
        with self.assertRaises(FileNotFoundError):
            rename_photos(os.path.join(self.folder, "missing"))


if __name__ == "__main__":
    unittest.main()
