"""Files of an artifact directory: paths confined to it, and their hashes.

An artifact holds native code, so every path its manifest (or a target's record in it)
names is resolved here: relative, without ``..`` or empty parts, and not through a
symbolic link, so that it cannot lead outside the directory whose files were hashed.
"""

from __future__ import annotations

import hashlib
import os
import stat

from ..errors import ArtifactError


def sha256_file(path: str) -> str:
    """The SHA-256 of the file at ``path``, hex."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_member_name(name: object, what: str = "file") -> str:
    """``name`` if it is a relative path of plain parts ('/'-separated, none empty, '.'
    or '..'); ArtifactError otherwise."""
    if not isinstance(name, str) or not name:
        raise ArtifactError(f"artifact {what} name {name!r} is not a relative path")
    parts = name.split("/")
    if name.startswith("/") or "\\" in name or "\0" in name or os.path.isabs(name) \
            or any(part in ("", ".", "..") for part in parts):
        raise ArtifactError(f"artifact {what} {name!r} is refused: a path that is absolute "
                            "or has '..' or empty parts could lead outside the artifact")
    return name


def member_path(directory: str, name: object, what: str = "file") -> str:
    """The path of ``name`` inside ``directory`` (see :func:`check_member_name`), every
    part of it below ``directory`` checked not to be a symbolic link."""
    name = check_member_name(name, what)
    path = directory
    for part in name.split("/"):
        path = os.path.join(path, part)
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return os.path.join(directory, *name.split("/"))  # missing: the caller says so
        except OSError as exc:
            raise ArtifactError(f"artifact {what} {name!r}: {exc.strerror}") from None
        if stat.S_ISLNK(mode):
            raise ArtifactError(f"artifact {what} {name!r} goes through a symbolic link "
                                f"({path}); an artifact holds regular files only")
    return path


def tree_files(directory: str) -> dict[str, str]:
    """Every file below ``directory`` by its '/'-separated relative name -> its kind
    (``file``, ``link`` or ``other``); symbolic links are not followed."""
    found = {}
    for root, dirs, names in os.walk(directory, followlinks=False):
        for entry in names + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            full = os.path.join(root, entry)
            rel = os.path.relpath(full, directory).replace(os.sep, "/")
            mode = os.lstat(full).st_mode
            found[rel] = "link" if stat.S_ISLNK(mode) else \
                "file" if stat.S_ISREG(mode) else "other"
    return found
