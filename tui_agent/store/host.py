"""Where this process runs, and what it can tell of another process on the same host.

A host is what sees the same processes under the same pids: the host name (or TUI_AGENT_HOST), the boot and,
on Linux, the pid namespace. Only two worker rows with one host id may probe each other's pids; where the boot
or the namespace cannot be read there is no host id, and leases decide.
Why: docs/architecture.md, section 7 (Workers) and 7.2 (One clock)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import signal
import socket
import struct
import sys
import time
from pathlib import Path

_PROC = Path("/proc")


def this_host() -> str:
    """The name this machine's workers register with: TUI_AGENT_HOST (to tell machines apart, or to simulate
    several on one), else the host name. A worker's process is probed only from its own host."""
    return os.environ.get("TUI_AGENT_HOST") or socket.gethostname()


def host_id(host: str) -> str | None:
    """The identity of `host` as this process sees it, or None where a part of it cannot be read.

    On Linux it is the name, the boot id and the pid namespace's inode; on macOS the name and the boot session."""
    boot, namespace = _boot(), _pid_namespace()
    if boot is None or (namespace is None and sys.platform != "darwin"):
        return None
    return f"{host} boot {boot}" + (f" pidns {namespace}" if namespace is not None else "")


def this_host_id() -> str | None:
    return host_id(this_host())


def on_this_host(worker: dict) -> bool:
    """Whether a worker row's pid names a process this one can see. The row's host id decides when it has one; a row
    an older tui-agent wrote has none, so its host name decides, as before host ids."""
    if worker.get("host_id") is not None:
        return worker["host_id"] == this_host_id()
    return worker["host"] == this_host()


@functools.cache
def _has_proc() -> bool:
    """Linux's /proc (else the kernel is asked through sysctl, as on macOS)."""
    return (_PROC / "self" / "stat").exists()


@functools.cache
def _boot() -> str | None:
    if _has_proc():
        try:
            return (_PROC / "sys" / "kernel" / "random" / "boot_id").read_text().strip() or None
        except OSError:
            return None
    found = (_sysctl_by_name(b"kern.bootsessionuuid") or b"").rstrip(b"\0")
    return found.decode("ascii", "replace") or None


@functools.cache
def _pid_namespace() -> int | None:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def process_start(pid: int) -> int | None:
    """When the process started, in a unit of this host's, or None when it cannot be read.

    On Linux: clock ticks after boot, /proc/<pid>/stat field 22. On macOS: microseconds since the epoch, from
    the kernel's process table."""
    if _has_proc():
        try:
            return int(_stat(pid)[19])
        except (OSError, IndexError, ValueError):
            return None
    found = _darwin_process(pid)
    return None if found is None else found[0]


def process_alive(pid: int, started: int | None) -> bool:
    """Whether the process that registered still exists. A stopped (SIGSTOP) or hung one does; a zombie, a missing
    pid, or a pid now held by a process that started at another time does not. Without a start time (a row an older
    tui-agent wrote, or a system that gives none) only whether the pid is in use can be said."""
    if _has_proc():
        try:
            fields = _stat(pid)
        except OSError:
            return False
        return fields[0] not in ("Z", "X") and (started is None or int(fields[19]) == started)
    if started is not None and (found := _darwin_process(pid)) is not None:
        return not found[1] and found[0] == started
    try:   # the kernel can still say whether the pid is used
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def group_left(pgid: int) -> int:
    """How many processes of process group `pgid` are left. On Linux zombies are not counted; elsewhere it is 1 for a
    group that still has any process, zombies included, and 0 for none."""
    try:   # a group with no process at all (the common case) is told apart without reading /proc
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return 0
    except PermissionError:
        pass
    if not _has_proc():
        return 1
    left = 0
    for entry in os.scandir(_PROC):
        if not entry.name.isdigit():
            continue
        try:
            fields = _stat(int(entry.name))
        except (OSError, IndexError):
            continue
        left += int(fields[2]) == pgid and fields[0] not in ("Z", "X")
    return left


def end_group(pgid: int, wait_s: float) -> int:
    """SIGKILL every process left in group `pgid`, wait up to `wait_s` for them to end, and return how many are still
    there. 0 means the group is empty. A process of another user cannot be killed and stays."""
    if not group_left(pgid):
        return 0
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return 0
    except PermissionError:
        pass
    deadline = time.monotonic() + wait_s
    while (left := group_left(pgid)) and time.monotonic() < deadline:
        time.sleep(0.005)
    return left


def _stat(pid: int) -> list[str]:
    """/proc/<pid>/stat from field 3 (the state) on; field 2, the command name, may hold spaces and ')'."""
    return (_PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()


# macOS: the kernel's process table through sysctl (sys/sysctl.h, sys/proc.h). A kinfo_proc opens with
# kp_proc, an extern_proc whose first member is a union holding p_starttime (a timeval: 64-bit seconds, 32-bit
# microseconds); p_stat (a char, SZOMB = 5 for a zombie) is at byte 36 and p_pid at byte 40.
_CTL_KERN, _KERN_PROC, _KERN_PROC_PID, _KINFO_PROC_SIZE, _SZOMB = 1, 14, 1, 648, 5


@functools.cache
def _libc():
    found = ctypes.util.find_library("c") if sys.platform == "darwin" else None
    return ctypes.CDLL(found, use_errno=True) if found else None


def _darwin_process(pid: int) -> tuple[int, bool] | None:
    """(start time in microseconds since the epoch, whether it is a zombie) of `pid`, or None (no such process,
    or not macOS)."""
    libc = _libc()
    if libc is None:
        return None
    mib = (ctypes.c_int * 4)(_CTL_KERN, _KERN_PROC, _KERN_PROC_PID, pid)
    buffer = ctypes.create_string_buffer(_KINFO_PROC_SIZE)
    size = ctypes.c_size_t(_KINFO_PROC_SIZE)
    if libc.sysctl(mib, 4, buffer, ctypes.byref(size), None, 0) != 0 or size.value < 44:
        return None
    seconds, micros = struct.unpack_from("=qi", buffer.raw, 0)
    status, found = struct.unpack_from("=b", buffer.raw, 36)[0], struct.unpack_from("=i", buffer.raw, 40)[0]
    if found != pid:
        return None
    return seconds * 1_000_000 + micros, status == _SZOMB


def _sysctl_by_name(name: bytes) -> bytes | None:
    libc = _libc()
    if libc is None:
        return None
    buffer, size = ctypes.create_string_buffer(64), ctypes.c_size_t(64)
    if libc.sysctlbyname(name, buffer, ctypes.byref(size), None, 0) != 0:
        return None
    return buffer.raw[:size.value]
