"""Files and folders without ``shutil`` (10 ms of imports a start) or ``hashlib`` (OpenSSL, 3 ms): a program looked for
as ``command -v`` does (``_which``), a folder removed as ``rm -rf`` does, never following a link and at any depth
(``_rmtree``), a file's sha256, and a host file name as JSON can hold it.
"""

import errno

from .lean import _sha256, os, stat


_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
"""How a folder is opened to be walked (the pack) or emptied (``_rmtree``): never through a link."""


def _which(program, path):
    """``program``'s path as ``command -v`` (and ``shutil.which``) finds it: a name with a '/' as it is, else the
    first executable file of that name in a folder of ``path``; None when there is none."""
    def runnable(candidate):
        return os.path.exists(candidate) and os.access(candidate, os.F_OK | os.X_OK) and not os.path.isdir(candidate)

    if os.path.dirname(program):
        return program if runnable(program) else None
    for folder in path.split(os.pathsep):
        candidate = os.path.join(folder, program)
        if runnable(candidate):
            return candidate
    return None


def _rmtree(path):
    """Remove ``path`` whole, never following a link (a link in its place, or inside, is removed itself): as
    ``rm -rf`` does, and ``shutil.rmtree`` (10 ms of imports a start). Raises OSError as it would."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path)
        return
    try:
        _rmtree_fds(path)
    except OSError as exc:
        if exc.errno != errno.EMFILE:
            raise
        # Deeper than the fds this process may hold, even at its hard limit: the host's own `rm -rf` (which walks with
        # a bounded number) removes it, as it would have before.
        import subprocess

        subprocess.run(["rm", "-rf", "--", path], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        if os.path.lexists(path):
            raise
        return
    os.rmdir(path)


def _rmtree_fds(path):
    """What is in the folder ``path``. Each folder's fd is held while its entries go (a path longer than PATH_MAX is no
    matter), deepest first, with no recursion; a tree deeper than the fds a process may hold (1,024 by default) first
    raises the limit to its hard bound. A folder is listed whole before anything in it is removed."""
    top = os.open(path, _DIR_FLAGS)
    stack = [(top, "", iter(_listing(top)))]
    try:
        while stack:
            fd, name, entries = stack[-1]
            entry = next(entries, None)
            if entry is None:
                stack.pop()
                if stack:
                    os.close(fd)
                    os.rmdir(name, dir_fd=stack[-1][0])
            elif entry.is_dir(follow_symlinks=False):
                try:
                    sub = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno != errno.EMFILE or not _more_fds():
                        raise
                    sub = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
                stack.append((sub, entry.name, iter(_listing(sub))))
            else:
                os.unlink(entry.name, dir_fd=fd)
    finally:
        for fd, _, _ in stack[1:]:
            os.close(fd)
        os.close(top)


def _more_fds():
    """Raise this process's limit of open files to its hard bound; whether that gave it more."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard != resource.RLIM_INFINITY and soft >= hard:
            return False
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return True
    except (ImportError, ValueError, OSError):
        return False


def _listing(fd):
    with os.scandir(fd) as entries:
        return list(entries)


def _hasher(size=0):
    """A sha256 object: the interpreter's own for what is small (no OpenSSL to load on the path of every attempt),
    hashlib's (OpenSSL, several times faster) for a file over 1 MiB."""
    if size > (1 << 20):
        import hashlib

        return hashlib.sha256()
    return _sha256()


def _sha256_file(path):
    h = _hasher(os.path.getsize(path))
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _text(name):
    """A host file name as JSON can hold it. A name of raw bytes (not UTF-8) reaches Python decoded with
    surrogates; each bad byte is written as a ``\\udcXX`` escape (the store uses the same form), and the exact
    bytes go beside it, base64-encoded, so nothing about the name is lost."""
    return name.encode("utf-8", "backslashreplace").decode("utf-8")
