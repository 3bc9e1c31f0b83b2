"""``python -m summeval_runner`` in a process of its own, started in milliseconds instead of
seconds: forked from a process that has already imported the package and its dependencies
(as multiprocessing's forkserver starts its workers), then run exactly as the interpreter runs
``-m``: its own pid, working directory, environment, ``sys.path`` and standard streams, signals
delivered to it alone, and an interpreter exit (``atexit``, flushed streams) with the exit code
the app returns, or minus the signal that killed it.

The package's console scripts are served the same way to shell scripts (``commands_path()``: a
``PATH`` whose ``summeval-run``, ``summeval-compare``, ... send their argv, working directory,
environment and standard streams to the server and exit with the forked command's code).

The tests that kill or interrupt a run start several of them each, and the docs' shell walks run
a command a line; paying the imports each time (about two seconds of CPU) was a large share of
the suite. The console scripts as installed are run by tests/test_install.py, from a wheel.

What a forked run shares with the others: the hash seed of the process it was forked from (each
real process draws its own; a test that needs another seed runs the app with ``run_process``
and ``PYTHONHASHSEED``).

Run as ``python -m tests.prestarted FD``: the server, reading requests on the socket ``FD``.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.metadata
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
# Forking a run and watching it end needs a pidfd (Linux 5.3 and later); elsewhere each run and
# command starts as an ordinary process, as before.
FORKS = hasattr(os, "pidfd_open") and hasattr(socket, "send_fds")
# Messages are small (an argv, a working directory, an environment).
MESSAGE_BYTES = 1 << 20


# --- the server: imports once, forks a run per request ---------------------------------------


# What a selector's key stands for: the suite's control socket, the listening socket of the
# commands on PATH, a command's connection (its request not yet read), or a run's pidfd (and,
# for a command, the connection its exit code goes back on).
_CONTROL, _LISTENING = "control", "listening"


@dataclass(frozen=True)
class _Waiting:
    connection: socket.socket


@dataclass(frozen=True)
class _Running:
    pid: int
    connection: socket.socket | None  # a command's; None for a run of the suite's own


def _serve(control: socket.socket, listening: socket.socket) -> None:
    """Fork a run per request and report when each ends, until the suite closes ``control``.
    Single-threaded, so that each fork copies a process no other thread holds a lock in."""
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ, _CONTROL)
    selector.register(listening, selectors.EVENT_READ, _LISTENING)

    def fork(request: dict[str, Any], fds: list[int], caller: socket.socket | None) -> int:
        pid = os.fork()
        if pid == 0:
            # The server's sockets and the other runs' pidfds are not the run's: closed, each
            # through what holds it (a socket object closed later would close a reused fd).
            for key in list(selector.get_map().values()):
                if isinstance(key.fileobj, socket.socket):
                    key.fileobj.close()
                else:
                    os.close(key.fd)
                if isinstance(key.data, _Running) and key.data.connection is not None:
                    key.data.connection.close()
            selector.close()
            if caller is not None:
                caller.close()
            _become(request, fds)  # raises SystemExit, never returns
        for fd in fds:
            os.close(fd)
        return pid

    while True:
        for key, _ in selector.select():
            if key.data == _CONTROL:
                message, fds, _, _ = socket.recv_fds(control, MESSAGE_BYTES, 2)
                if not message:
                    return  # the suite's process ended
                pid = fork(json.loads(message), fds, None)
                selector.register(os.pidfd_open(pid), selectors.EVENT_READ, _Running(pid, None))
                control.send(json.dumps({"started": pid}).encode())
            elif key.data == _LISTENING:
                connection, _ = listening.accept()
                selector.register(connection, selectors.EVENT_READ, _Waiting(connection))
            elif isinstance(key.data, _Waiting):
                selector.unregister(key.fd)
                message, fds, _, _ = socket.recv_fds(key.data.connection, MESSAGE_BYTES, 3)
                if not message:
                    key.data.connection.close()
                    continue
                pid = fork(json.loads(message), fds, key.data.connection)
                running = _Running(pid, key.data.connection)
                selector.register(os.pidfd_open(pid), selectors.EVENT_READ, running)
            else:
                selector.unregister(key.fd)
                os.close(key.fd)
                _, status = os.waitpid(key.data.pid, 0)
                code = os.waitstatus_to_exitcode(status)
                if key.data.connection is None:
                    ended = {"ended": key.data.pid, "returncode": code}
                    control.send(json.dumps(ended).encode())
                else:
                    with contextlib.suppress(OSError):  # the command on PATH was killed
                        key.data.connection.send(json.dumps({"returncode": code}).encode())
                    key.data.connection.close()


def _become(request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: the process ``python -m summeval_runner ARGV`` would be, or the
    console script ``request["command"]`` (standard streams: the command's own, passed in)."""
    streams = fds if len(fds) == 3 else [os.open(os.devnull, os.O_RDONLY), *fds]
    for target, fd in enumerate(streams):
        os.dup2(fd, target)
        os.close(fd)
    # The dispositions a new interpreter starts with.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    cwd = request["cwd"]
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(request["env"])
    extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    command = request.get("command")
    if command is None:
        # -m puts the working directory first, then PYTHONPATH, then the installation's paths.
        sys.path[:] = [cwd, *extra, *sys.path[1:]]
        sys.argv = [str(ROOT / "summeval_runner" / "__main__.py"), *request["argv"]]
        import runpy

        runpy.run_module("summeval_runner", run_name="__main__", alter_sys=True)
        raise SystemExit(0)
    # A console script puts its own folder first, as its wrapper does `sys.exit(main())`.
    script = Path(sys.executable).parent / command
    sys.path[:] = [str(script.parent), *extra, *sys.path[1:]]
    sys.argv = [str(script), *request["argv"]]
    (entry,) = importlib.metadata.entry_points(group="console_scripts", name=command)
    raise SystemExit(entry.load()())


def _server_main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listening.bind(sys.argv[2])
    listening.listen(16)
    # What `python -m summeval_runner` and the console scripts import, and the judge SDK most
    # of these runs use.
    import openai  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    import summeval_runner._cli._agree
    import summeval_runner._cli._app
    import summeval_runner._cli._cache_command
    import summeval_runner._cli._compare_command
    import summeval_runner._cli._merge_command  # noqa: F401

    control.send(b'{"ready": true}')
    _serve(control, listening)


# --- the suite's side -------------------------------------------------------------------------


class _Server:
    """The one server of this process (an xdist worker), started at its first run."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="prestarted-"))
        self.commands = self.folder / "bin"
        _write_commands(self.commands, self.folder / "socket")
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.prestarted",
                str(theirs.fileno()),
                str(self.folder / "socket"),
            ],
            pass_fds=[theirs.fileno()],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        theirs.close()
        self.lock = threading.Lock()
        self.ended: dict[int, int] = {}
        self._receive(timeout=120)  # ready

    def start(self, argv: list[str], cwd: Path, env: dict[str, str], streams: list[int]) -> int:
        request = json.dumps({"argv": argv, "cwd": str(cwd), "env": env}).encode()
        with self.lock:
            socket.send_fds(self.control, [request], streams)
            while True:
                message = self._receive(timeout=120)
                if "started" in message:
                    return int(message["started"])

    def collect(self, timeout: float) -> None:
        """Note the runs that ended, waiting up to ``timeout`` seconds for one message."""
        with self.lock:
            with contextlib.suppress(TimeoutError):
                self._receive(timeout=timeout)
            while True:
                try:
                    self._receive(timeout=0)
                except TimeoutError:
                    return

    def _receive(self, timeout: float) -> dict[str, Any]:
        self.control.settimeout(timeout if timeout > 0 else 0.0)
        try:
            data = self.control.recv(MESSAGE_BYTES)
        except (TimeoutError, BlockingIOError) as nothing:
            raise TimeoutError from nothing
        if not data:
            raise RuntimeError(f"the run server ended (exit {self.process.poll()})")
        message: dict[str, Any] = json.loads(data)
        if "ended" in message:
            self.ended[int(message["ended"])] = int(message["returncode"])
        return message

    def close(self) -> None:
        self.control.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        shutil.rmtree(self.folder, ignore_errors=True)


# A console script of the package, as the server runs it: its argv, working directory,
# environment and standard streams sent to the server, which forks the command's process; this
# one exits with its code (128 + N for a process killed by signal N, as a shell reports it).
# `-S`: no site-packages to read, so it starts in milliseconds.
_COMMAND = """#!{python} -S
import json, os, socket, sys
server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
server.connect({socket_path!r})
request = {{"command": {name!r}, "argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}}
socket.send_fds(server, [json.dumps(request).encode()], [0, 1, 2])
reply = server.recv(1 << 16)
code = json.loads(reply)["returncode"] if reply else 1
sys.exit(code if code >= 0 else 128 - code)
"""


def _write_commands(folder: Path, socket_path: Path) -> None:
    folder.mkdir(parents=True)
    for entry in importlib.metadata.entry_points(group="console_scripts"):
        if entry.module.split(".")[0] != "summeval_runner":
            continue
        command = folder / entry.name
        command.write_text(
            _COMMAND.format(python=sys.executable, socket_path=str(socket_path), name=entry.name),
            encoding="utf-8",
        )
        command.chmod(0o755)


_server: _Server | None = None


def _the_server() -> _Server:
    global _server
    if _server is None:
        _server = _Server()
        atexit.register(_server.close)
    return _server


class PrestartedApp:
    """A run started by :func:`start`, with the part of ``subprocess.Popen`` the tests use."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str]) -> None:
        # Files, not pipes: a run that prints more than a pipe holds never blocks on a test
        # that reads only once it has ended. Closed by communicate().
        self._streams: list[IO[bytes]] = [tempfile.TemporaryFile() for _ in range(2)]  # noqa: SIM115
        # Closed when the object goes, if no test called communicate().
        weakref.finalize(self, _close_all, self._streams)
        self.args = argv
        self.returncode: int | None = None
        self._output: tuple[str, str] | None = None
        self._process: subprocess.Popen[bytes] | None = None
        if not FORKS:
            # Where a process cannot be forked and watched so (no pidfd: not Linux), started
            # as it is.
            self._process = subprocess.Popen(
                [sys.executable, "-m", "summeval_runner", *argv],
                stdin=subprocess.DEVNULL,
                stdout=self._streams[0],
                stderr=self._streams[1],
                cwd=cwd,
                env=env,
            )
            self.pid = self._process.pid
            return
        self._server = _the_server()
        self.pid = self._server.start(argv, cwd, env, [f.fileno() for f in self._streams])

    def poll(self) -> int | None:
        if self._process is not None:
            self.returncode = self._process.poll()
        elif self.returncode is None:
            self._server.collect(timeout=0)
            self.returncode = self._server.ended.get(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self._process is not None:
            self.returncode = self._process.wait(timeout)
            return self.returncode
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self._server.collect(timeout=min(left, 0.5) if left is not None else 0.5)
        assert self.returncode is not None
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Wait for the run to end; what it wrote on stdout and stderr."""
        self.wait(timeout)
        if self._output is None:
            printed = []
            for stream in self._streams:
                stream.seek(0)
                printed.append(stream.read().decode("utf-8", errors="replace"))
            self._output = (printed[0], printed[1])
            _close_all(self._streams)
        return self._output

    def stderr_so_far(self) -> str:
        """What the run has written on stderr up to now (it may still be running)."""
        return os.pread(self._streams[1].fileno(), MESSAGE_BYTES, 0).decode(errors="replace")

    def send_signal(self, number: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, number)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _close_all(streams: list[IO[bytes]]) -> None:
    for stream in streams:
        stream.close()


def commands_path() -> str:
    """A ``PATH`` on which the package's console scripts (``summeval-run``, ``summeval-compare``,
    ...) are served by this process's server, then this interpreter's folder (``python``, other
    installed commands), then the rest of ``PATH``: for a shell script that runs them, as a
    user's shell would after ``pip install``, without paying their imports at each command."""
    if not FORKS:
        return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    parts = [_the_server().commands, Path(sys.executable).parent]
    return os.pathsep.join([*map(str, parts), os.environ.get("PATH", "")])


def start(argv: list[str], *, cwd: Path, env: dict[str, str]) -> PrestartedApp:
    """``python -m summeval_runner ARGV`` from ``cwd`` with exactly ``env``, not waited for."""
    return PrestartedApp(argv, cwd, env)


if __name__ == "__main__":
    _server_main()
