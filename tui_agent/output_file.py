"""`-o FILE`: what a command would print, saved to a file instead, whole or not at all.

A new file, or with `force` an existing one, is replaced atomically (agents/files.write_atomic); a device or a
pipe (`/dev/stdout`, a FIFO) is written into. What goes wrong is one line with the catalogue's exit code: a
missing folder 2, an existing file without `force` 2, a full or failing disk 4, a folder or file this user may
not write 4."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from .agents.files import write_atomic
from .errors import EnvironmentStop, UserError
from .store.environment import FULL, READ_ONLY


def save(data: bytes, output: str, force: bool = False) -> None:
    """Write `data` to `output` (see the module); a link is followed, so the file it names is replaced."""
    path = Path(output)
    try:
        if path.exists() and not stat.S_ISREG(path.stat().st_mode):
            with open(path, "wb") as stream:
                stream.write(data)
            return
        if os.path.lexists(path) and not force:
            raise UserError(f"-o {output} already exists; nothing was written; pass --force to replace it")
        real = Path(os.path.realpath(path))
        write_atomic(real.parent, real.name, data)
    except OSError as e:
        refused = refusal(e, output)
        if refused is None:
            raise
        raise refused from None


def refusal(error: OSError, output: str) -> Exception | None:
    """The one line for what stopped the write, or None for what is no user's or environment's doing."""
    if error.errno in (errno.ENOENT, errno.ENOTDIR):
        return UserError(f"-o {output}: the folder {Path(output).parent} does not exist; make it first "
                         "(mkdir -p), or save somewhere else")
    if error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO):
        return EnvironmentStop(FULL, f"the disk is full (or failing): {output} could not be written "
                                     f"({error.strerror}); nothing was written; free space and run the command again")
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return EnvironmentStop(READ_ONLY, f"-o {output}: {error.strerror}; nothing was written; save somewhere "
                                          "this user may write")
    return None
