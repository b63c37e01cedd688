"""The socket's folder, checked before the service listens in it or a client trusts it.

The folder is the first wall: 0700 and ours. A folder under /tmp (the short fallback for
a deep home, core.paths.service_socket_path) could have been made by someone else first,
or be a symlink to their folder: then nothing is created there and the user is told.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from core import paths


class SocketFolderError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def socket_path() -> Path:
    """This home's service socket (core.paths decides where)."""
    return paths.service_socket_path()


def prepare_folder(folder: Path) -> None:
    """Make `folder` 0700 (creating it), or raise SocketFolderError when it is not ours."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(folder)
    except OSError as exc:
        raise SocketFolderError(f"The service's folder {folder} cannot be made "
                                f"({exc.strerror}).") from None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise SocketFolderError(f"{folder} is not a plain folder (a link?); remove it and "
                                "start llmdeck again.")
    if info.st_uid != os.getuid():
        raise SocketFolderError(f"{folder} belongs to another user (uid {info.st_uid}); "
                                "remove it, or set LLMDECK_HOME to a folder of your own.")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(folder, 0o700)
