"""A throwaway PostgreSQL server from the binaries installed on this machine, for the tests (tests/pg_server.py
makes fixtures of it) and the benches (bench/peers.py and bench/workers.py with --postgres and no URL), which must
run without pytest.

A server lives in a private temporary folder: 127.0.0.1 on a free port and a unix socket inside the folder, trust
authentication, user `postgres`, C locale (text orders by bytes, as SQLite's BINARY collation does), fsync on;
`stop` stops it with `pg_ctl -m immediate` and removes the folder. A test that takes the server away and back
(`crash`, then `start_again`: the same folder and port, recovering from its write-ahead log) owns a server of
its own. As root (the server refuses to run as root)
initdb and pg_ctl run as the `postgres` user through `runuser`.
"""

from __future__ import annotations

import glob
import os
import pwd
import re
import secrets
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

BIN_GLOB = "/usr/lib/postgresql/*/bin"
SKIP_REASON = f"PostgreSQL binaries not found under {BIN_GLOB}; .ci/run installs them"
SERVER_SETTINGS = ["-c", "shared_buffers=32MB", "-c", "max_connections=200"]
STARTS = 3  # a free port can be taken by another process between finding it and the server binding it


def find_bin_dir() -> Path | None:
    """The newest installed version's bin folder that has initdb, pg_ctl and postgres, or None."""
    found = []
    for path in glob.glob(BIN_GLOB):
        bin_dir = Path(path)
        version = re.match(r"\d+(?:\.\d+)*", bin_dir.parent.name)
        if version and all(os.access(bin_dir / name, os.X_OK) for name in ("initdb", "pg_ctl", "postgres")):
            found.append((tuple(int(part) for part in version.group().split(".")), bin_dir))
    return max(found)[1] if found else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    """One server in its own temporary folder (data/, sock/, log)."""

    def __init__(self, bin_dir: Path):
        self.bin_dir = bin_dir
        self.as_postgres = os.geteuid() == 0
        self.base = Path(tempfile.mkdtemp(prefix="tui-agent-pg-"))
        self.data = self.base / "data"
        self.sock = self.base / "sock"
        self.log = self.base / "log"
        self.port: int | None = None
        if self.as_postgres:
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                shutil.rmtree(self.base, ignore_errors=True)
                raise RuntimeError("running as root, and there is no `postgres` user to run the PostgreSQL server as") from None
            os.chown(self.base, user.pw_uid, user.pw_gid)
        self.sock.mkdir()
        if self.as_postgres:
            os.chown(self.sock, user.pw_uid, user.pw_gid)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}"

    def _run(self, name: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        argv = [str(self.bin_dir / name), *args]
        if self.as_postgres:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        # cwd: the postgres user may not be allowed into the caller's folder (initdb warns, pg_ctl may fail)
        done = subprocess.run(argv, cwd=self.base, capture_output=True, text=True, timeout=120)
        if check and done.returncode != 0:
            raise RuntimeError(f"{name} exited {done.returncode}:\n{done.stdout}{done.stderr}{self._log_tail()}")
        return done

    def _log_tail(self) -> str:
        try:
            return "\n--- server log ---\n" + self.log.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def start(self) -> None:
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8",
                  "--locale=C")
        for attempt in range(STARTS):
            self.port = _free_port()
            if self._pg_ctl_start(check=attempt == STARTS - 1).returncode == 0:
                return

    def _pg_ctl_start(self, check: bool = True) -> subprocess.CompletedProcess:
        options = ["-c", "listen_addresses=127.0.0.1", "-p", str(self.port), "-k", str(self.sock), *SERVER_SETTINGS]
        return self._run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "-l", str(self.log), "start",
                         "-o", shlex.join(options), check=check)

    def crash(self) -> None:
        """Stop the server as a crash would (`pg_ctl stop -m immediate`: every session cut, nothing flushed that
        was not already), keeping its folder and port for `start_again`."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def start_again(self) -> None:
        """Start the stopped server on its folder and port; it recovers what was committed."""
        self._pg_ctl_start()

    def stop(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)
        finally:
            shutil.rmtree(self.base, ignore_errors=True)


def create_database(server: str, template: str | None = None) -> str:
    """A new database on `server` (empty, or a clone of `template`, which nobody may be connected to); its name."""
    import psycopg
    from psycopg import sql

    name = f"t_{secrets.token_hex(6)}"
    statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template is not None:
        statement += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(statement)
    return name


def drop_database(server: str, name: str) -> None:
    """Drop database `name`, with any connection a test left open to it."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def timings() -> dict[str, float]:
    """Seconds for initdb + start, one CREATE DATABASE and one DROP DATABASE, and stop (`python tests/pg_cluster.py`)."""
    import psycopg

    bin_dir = find_bin_dir()
    if bin_dir is None:
        raise SystemExit(SKIP_REASON)
    server = PgServer(bin_dir)
    out = {}
    try:
        t = time.perf_counter()
        server.start()
        out["initdb_and_start_s"] = time.perf_counter() - t
        with psycopg.connect(f"{server.url}/postgres", autocommit=True) as admin:
            for i in range(5):
                t = time.perf_counter()
                admin.execute(f"CREATE DATABASE t_timing_{i}")
                out[f"create_database_{i}_s"] = time.perf_counter() - t
                t = time.perf_counter()
                admin.execute(f"DROP DATABASE t_timing_{i} WITH (FORCE)")
                out[f"drop_database_{i}_s"] = time.perf_counter() - t
    finally:
        t = time.perf_counter()
        server.stop()
        out["stop_and_remove_s"] = time.perf_counter() - t
    return out


if __name__ == "__main__":
    for key, value in timings().items():
        print(f"{key:24} {value:.3f}")
