"""A delivery's place on the host: its folder (``.fleet/deliveries/TOKEN/``, mode 0700, outside the attempt folder),
its running entry (``.fleet/running/TOKEN.json``), the space it holds back for a full disk (``reserve``), and its
wake FIFO (``wake``). docs/launcher.md, "Layout on the host".
"""

import errno

from .lean import os, stat


def delivery_dir(fleet, token):
    return os.path.join(fleet, "deliveries", token)


def _entry_path(fleet, token):
    return os.path.join(fleet, "running", token + ".json")


def _makedirs_private(path):
    os.makedirs(path, mode=0o700, exist_ok=True)
    try:
        os.chmod(path, 0o700)
    except OSError:
        pass


RESERVE = "reserve"
RESERVE_BYTES = 1024 * 1024
"""Space the delivery holds from its start, given back when the host's disk is full, so that an agent that filled
it still gets its exit record and manifest written (else its run would read as a supervisor that crashed)."""


def _reserve(here):
    try:
        fd = os.open(os.path.join(here, RESERVE), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError:
        return  # the records below fail as they would have
    try:
        # Allocated, not truncated: a sparse file would hold no space. fallocate takes the blocks without writing them
        # (a 1 MiB write was a millisecond on the path to the agent's start); where there is none, written. Not synced:
        # the space is charged when the bytes are written (tmpfs, and ext4's and XFS's delayed allocation reserve it
        # then).
        try:
            os.posix_fallocate(fd, 0, RESERVE_BYTES)
        except (AttributeError, OSError) as exc:
            if getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT):
                return  # no room even for this
            os.write(fd, b"\0" * RESERVE_BYTES)
    except OSError:
        pass  # no room even for this: the records below fail as they would have
    finally:
        os.close(fd)


def _with_reserve(here, write):
    """``write()``; if the disk is full, give the reserve back and try once more."""
    try:
        return write()
    except OSError as exc:
        path = os.path.join(here, RESERVE)
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or not os.path.exists(path):
            raise
        os.unlink(path)
        return write()


WAKE = "wake"
"""A FIFO in the delivery folder: the supervisor writes a line into it when exit.json, then packed.json, is there, and
the worker's poll on the host blocks reading it (workers.attempt.poll_script), so the agent's end is seen at once
and no host process wakes at intervals to look."""


def _waker(here):
    """What writes the wake line: the FIFO held open for reading and writing, so a write never blocks nor fails for want
    of a reader (the line waits in it for the next poll), and a poll's open never waits for a writer."""
    try:
        fd = os.open(os.path.join(here, WAKE), os.O_RDWR | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError("not a FIFO")
    except OSError:
        return lambda: None

    def wake():
        try:
            os.write(fd, b"x\n")
        except OSError:
            pass  # full of lines nobody read (an agent's): a poll that waits wakes anyway

    return wake
