"""Who is on the other end of a Unix socket, from the kernel (not from anything they say).

The socket is 0600 in a 0700 folder, which already keeps other users out; the peer
check is the second wall, for a folder someone loosened by hand or a file system that
ignores modes. Linux answers SO_PEERCRED (pid, uid, gid); macOS answers LOCAL_PEERCRED
(a struct xucred: version, uid, groups) and LOCAL_PEERPID through getsockopt at level
SOL_LOCAL (0), the same numbers getpeereid(3) reads.
"""

from __future__ import annotations

import socket
import struct
import sys
from dataclasses import dataclass

SOL_LOCAL = 0  # macOS <sys/un.h>
LOCAL_PEERCRED = 0x001
LOCAL_PEERPID = 0x002
_XUCRED_SIZE = 4 + 4 + 2 + 2 + 16 * 4  # cr_version, cr_uid, cr_ngroups (+pad), cr_groups[16]


@dataclass(frozen=True, slots=True)
class Peer:
    uid: int
    pid: int | None  # None where the platform does not say


def peer_of(sock: socket.socket) -> Peer | None:
    """The connecting process's uid (and pid), or None when the platform cannot tell."""
    try:
        if sys.platform.startswith("linux"):
            raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            pid, uid, _gid = struct.unpack("3i", raw)
            return Peer(uid=uid, pid=pid or None)
        if sys.platform == "darwin":
            raw = sock.getsockopt(SOL_LOCAL, LOCAL_PEERCRED, _XUCRED_SIZE)
            _version, uid = struct.unpack_from("=II", raw)
            try:
                pid = struct.unpack("i", sock.getsockopt(SOL_LOCAL, LOCAL_PEERPID, 4))[0]
            except OSError:
                pid = None
            return Peer(uid=uid, pid=pid)
    except (OSError, struct.error):
        return None
    return None
