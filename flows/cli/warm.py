"""The warm process: ifsynth loaded once, and a process forked from it for each `ifsynth run`.

Most of a fully cached rerun is imports, not work: Prefect, the openai SDK, DuckDB, pyarrow and ifsynth's own
modules take 2-4 s of CPU in every process (bench/README.md), and only a process kept between commands saves
them. So the first `ifsynth run` in a folder starts one in the background, and runs as it always did; later
runs from the same interpreter and folder hand it their arguments, environment and standard streams over a
Unix socket and wait. It forks a child that takes them on (folder, environment, streams, umask, a process
group of its own) and runs the command as a fresh process would; the command's signals (Ctrl-C, ``kill``,
Ctrl-Z) go to that child's process group, and the child's exit status is the command's.

A warm process serves only commands that would have loaded exactly what it loaded: the same interpreter,
folder, environment, user, limits, ifsynth source files, installed packages and Prefect settings files (the
``key``). Any other command runs as before and replaces it. It is said once where it runs and how to stop it;
it stops by itself after ``IFSYNTH_WARM_IDLE`` seconds (1,800) with no command, or now with ``ifsynth warm
--stop``; ``IFSYNTH_WARM=0`` turns it off. Its socket, lock, record and log are in a folder only its user may
enter, ``$XDG_RUNTIME_DIR`` (or the temporary folder) ``/ifsynth-warm-<uid>``.

This module is the ``ifsynth`` command's entry point, so it imports only the standard library's lightest
modules: everything heavy is what the warm process is there to have loaded already.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import hashlib
import json
import math
import os
import signal
import socket
import stat
import struct
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

IDLE_SECONDS = 1800.0
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
# A shell's and a terminal's bookkeeping, which no module reads as it loads (the run still gets them): two
# terminals in one folder differ in these, and would otherwise replace each other's warm process.
VOLATILE = frozenset(
    {"_", "PWD", "OLDPWD", "SHLVL", "SSH_CONNECTION", "SSH_CLIENT", "SSH_TTY", "TMUX_PANE", "WINDOWID", "STY",
     "WINDOW", "TERM_SESSION_ID", "ITERM_SESSION_ID", "GPG_TTY"}
)  # fmt: skip
GLOBAL_VALUED = ("--warehouse", "--memory-limit")  # the options before the command that take a value
SOURCES = ("flows", "prompts", "schemas", "warehouse")  # ifsynth's folders, as installed
MODULE = "ifsynth.flows.cli.warm"
EXIT_LOST = 70  # the warm process went away before the command's end
READY_SECONDS = 0.5  # how often an idle warm process looks for the local Prefect server to make ahead for
REPLY_SECONDS = 10.0  # a warm process forks within milliseconds of a request; one that does not is hung
HELD = {*FORWARDED, signal.SIGTSTP}  # held from the fork until the child runs the command as its own
GO = b"g"  # the command's word that its child may begin
SOCKET_PATH_MAX = 100


def script() -> NoReturn:
    """``ifsynth``: a run through the warm process when one serves this command, else as a process of its own
    (starting a warm process for the next run)."""
    if _wanted(sys.argv[1:]):
        started = _through_warm()
        if started is not None:  # the run began: whatever follows, it is not run again here
            os._exit(_outcome(*started))
    from ifsynth.flows.cli.app import script as cold

    cold()


def _through_warm() -> tuple[int, socket.socket] | None:
    """The run the warm process began for this command; None when it runs by itself: none serves it (one is
    started for the next), or something failed before the run could begin (a folder gone or unwritable, a
    socket refused midway, a warm process that does not answer)."""
    try:
        place = Place.here()
        if place is None:
            return None
        request = _request()
        started = _started(place, request)
        if started is None:
            place.start(request["key"])
        return started
    except OSError:
        return None
    except KeyboardInterrupt:  # Ctrl-C before the run began (once it has, Ctrl-C is the run's)
        os._exit(128 + signal.SIGINT)


def _wanted(args: list[str]) -> bool:
    """Whether this command is a run the warm process may serve: `run`, without --debug (which changes
    Prefect's settings before its import), on a system that can pass file descriptors."""
    if os.environ.get("IFSYNTH_WARM", "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    if not hasattr(socket, "send_fds") or not hasattr(os, "fork"):
        return False
    try:
        for fd in (0, 1, 2):  # the streams it hands over
            os.fstat(fd)
    except OSError:
        return False
    if not _plain_interpreter():
        return False
    index = 0
    while index < len(args) and args[index].split("=", 1)[0] in GLOBAL_VALUED:
        index += 1 if "=" in args[index] else 2
    return args[index : index + 1] == ["run"]


def _plain_interpreter() -> bool:
    """Whether Python runs with its default flags, as the warm process does: -O, -X, -W, -I, -S and the
    like change what a process loads or how it behaves, and such a command runs by itself (so does one under
    PYTHONNOUSERSITE, which sets -s's flag)."""
    flags = sys.flags
    changed = (flags.optimize, flags.dev_mode, flags.verbose, flags.bytes_warning, flags.inspect, flags.isolated,
               flags.no_site, flags.no_user_site, flags.ignore_environment, flags.debug, sys.warnoptions,
               sys._xoptions)  # fmt: skip
    return not any(changed)  # -u is handed over with the streams


def idle_seconds() -> float:
    value = os.environ.get("IFSYNTH_WARM_IDLE", "")
    try:
        seconds = float(value) if value.strip() else IDLE_SECONDS
    except ValueError:
        seconds = math.nan
    if not (0 < seconds <= 2**31 / 1000):  # what a selector's wait takes
        sys.stderr.write("error: IFSYNTH_WARM_IDLE is a number of seconds above 0\n")
        os._exit(2)
    return seconds


class Place(NamedTuple):
    """Where the warm process of one interpreter and folder keeps its socket, lock, record and log."""

    stem: Path

    @staticmethod
    def folder() -> Path | None:
        """The user's folder of warm processes, made if missing; None when it is not the user's alone (another
        user made it first, or it is a link): nobody else may reach a warm process, which runs what it is sent."""
        base = Path(os.environ.get("XDG_RUNTIME_DIR") or os.environ.get("TMPDIR") or "/tmp")
        folder = base / f"ifsynth-warm-{os.getuid()}"
        try:
            shared = os.stat(base)
        except OSError:
            return None
        if shared.st_uid not in (0, os.getuid()):
            return None  # its owner could move the folder aside and put their own in its place
        if shared.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not shared.st_mode & stat.S_ISVTX:
            return None  # and so could anyone who may write in it, unless it is sticky (/tmp)
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            pass
        except OSError:
            return None
        try:
            found = os.lstat(folder)
        except OSError:
            return None
        if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o077:
            return None
        return folder

    @classmethod
    def here(cls) -> Place | None:
        folder = cls.folder()
        if folder is None:
            return None
        name = hashlib.sha256(f"{sys.executable}\0{os.getcwd()}".encode()).hexdigest()[:16]
        place = cls(folder / name)
        if len(os.fsencode(place.file(f".{1 << 22}.sock"))) > SOCKET_PATH_MAX:
            return None  # a socket's address is at most 108 bytes (104 on macOS)
        return place

    def file(self, suffix: str) -> Path:
        return self.stem.with_name(self.stem.name + suffix)

    def start(self, key: str) -> None:
        """Start the warm process for ``key`` in the background, unless one is starting or serving here; said
        once, with how to stop it."""
        with contextlib.suppress(OSError):
            if self.file(".failed").read_text() == key:
                return  # it failed to start for this very key: once is enough (its log says why)
        with self.file(".lock").open("ab") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # one is starting (or still serving the runs of a key it gave up)
        import subprocess

        idle = idle_seconds()
        with self.file(".log").open("ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-P", "-m", MODULE, str(self.stem), key, str(idle)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # outlives this command; a terminal's Ctrl-C does not reach it
            )
        sys.stderr.write(
            f"started a warm ifsynth process (pid {process.pid}) that later runs in this folder reuse; it stops "
            f"after {idle / 60:.0f} min idle, or now with `ifsynth warm --stop`; IFSYNTH_WARM=0 turns it off\n"
        )


def _request() -> dict[str, Any]:
    """What the child needs to become this command, and the key of what a process loads before it runs one."""
    env = dict(os.environ)
    cwd = os.getcwd()
    loaded = {
        "python": [sys.executable, sys.version, sys.flags.optimize, sys.flags.isolated],
        "cwd": cwd,
        "env": sorted((name, value) for name, value in env.items() if name not in VOLATILE),
        "ids": [os.getuid(), os.getgid(), sorted(os.getgroups())],
        "limits": _limits(),
        "files": _stamps(cwd, env),
    }
    key = hashlib.sha256(json.dumps(loaded, sort_keys=True).encode()).hexdigest()
    streams = [_settings(stream) for stream in (sys.stdin, sys.stdout, sys.stderr)]
    ignored = [int(n) for n in signal.valid_signals() if _ignored(n)]
    main = sys.modules.get("__main__")
    return {
        "ignored": ignored,  # nohup's SIGHUP, say: the run ignores them too
        "blocked": sorted(int(n) for n in signal.pthread_sigmask(signal.SIG_BLOCK, ())),  # as it inherited them
        "main_package": getattr(main, "__package__", None),  # how click names the program in its help
        "key": key,
        "argv": sys.argv,
        "env": env,
        "cwd": cwd,
        "umask": _umask(),
        "path": sys.path,
        "streams": streams,
    }


def _settings(stream: Any) -> list[Any] | None:
    """A standard stream's text settings, for the child's own stream on the same descriptor."""
    if not hasattr(stream, "reconfigure"):  # None, or replaced by a caller's own object
        return None
    return [stream.encoding, stream.errors, stream.line_buffering, stream.write_through]


def _ignored(signum: int) -> bool:
    try:
        return signal.getsignal(signum) is signal.SIG_IGN
    except (OSError, ValueError):
        return False


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _limits() -> list[Any]:
    import resource

    limits = [resource.getrlimit(getattr(resource, name)) for name in dir(resource) if name.startswith("RLIMIT_")]
    placed: list[Any] = [os.getpriority(os.PRIO_PROCESS, 0)]
    if hasattr(os, "sched_getaffinity"):  # taskset, a scheduler's policy
        placed += [sorted(os.sched_getaffinity(0)), os.sched_getscheduler(0)]
    proc = Path("/proc/self")
    if proc.exists():  # cgroup (memory and CPU limits), OOM score, namespaces (unshare)
        placed += [(proc / "cgroup").read_text(), (proc / "oom_score_adj").read_text()]
        with contextlib.suppress(OSError):
            placed += sorted(os.readlink(entry) for entry in (proc / "ns").iterdir())
    return [limits, placed]


def _stamps(cwd: str, env: dict[str, str]) -> list[Any]:
    """Modification times of what a process reads as it loads: ifsynth's sources, the installed packages (a
    site-packages folder changes when a package is installed or removed) and Prefect's settings files."""
    root = Path(__file__).resolve().parents[2]
    stamps: list[Any] = []
    for folder in SOURCES:
        for parent, dirs, files in os.walk(root / folder):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            stamps.extend(_stamp(os.path.join(parent, f)) for f in sorted(files) if f.endswith(".py"))
    stamps.extend(_stamp(p) for p in sys.path if p.endswith(("site-packages", "dist-packages")))
    home = Path(env.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()
    settings = [env.get("PREFECT_PROFILES_PATH") or home / "profiles.toml"]
    stamps.extend(_stamp(p) for p in [*settings, *(Path(cwd, f) for f in ("prefect.toml", "pyproject.toml", ".env"))])
    return stamps


def _stamp(path: str | Path) -> list[Any]:
    try:
        found = os.stat(path)
    except OSError:
        return [str(path), None]
    return [str(path), found.st_mtime_ns, found.st_size]


def _started(place: Place, request: dict[str, Any]) -> tuple[int, socket.socket] | None:
    """The pid of the run the warm process forked for this command, and the connection its end comes by;
    None when none serves this command's key (none runs, or it runs for another key and now retires): the
    command then runs by itself.

    The child the warm process forks waits for a word ("go") that only this command sends, once it has the
    child's pid and passes its signals on: so a command that gave up on the warm process (it timed out, or the
    warm process died before it answered) runs by itself knowing its child never will, and one that sent the
    word never runs by itself. An error here is raised before the child may begin."""
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.settimeout(REPLY_SECONDS)  # a warm process that hangs is left for a run by itself
    try:
        connection.connect(str(place.file(".sock")))
    except OSError:  # none serves here: one is started
        connection.close()
        return None
    try:
        if not _same_user(connection):
            raise ConnectionRefusedError("the warm process's socket is not this user's")
        data = json.dumps(request).encode()
        socket.send_fds(connection, [struct.pack("!I", len(data)) + data], [0, 1, 2])
        connection.settimeout(REPLY_SECONDS)
        reply = _reply(connection)
    except BaseException:
        connection.close()  # the warm process then stops the child, which has not begun
        raise
    if reply is None or "pid" not in reply:
        connection.close()
        return None
    pid = int(reply["pid"])
    held = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)  # a signal from now on is the run's: none is lost
    try:
        connection.sendall(GO)
    except OSError:  # the warm process closed the connection unread, so the child never begins
        connection.close()
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        return None
    _forward_signals(pid)
    signal.pthread_sigmask(signal.SIG_SETMASK, held)
    connection.settimeout(None)
    return pid, connection


def _outcome(pid: int, connection: socket.socket) -> int:
    """Wait for the run's end; its exit status, or death by its signal."""
    with connection:
        try:
            reply = _reply(connection)
        except OSError:
            reply = None
    if reply is None:  # the warm process was killed: the run's own end is waited for, its status unknown
        while _exists(pid):
            time.sleep(0.1)
        with contextlib.suppress(OSError):
            sys.stderr.write(
                f"error: the warm ifsynth process was stopped before this command's end; its run (process {pid}) "
                "may not have begun or finished: run the same command again to continue it\n"
            )
        return EXIT_LOST
    code = int(reply.get("exit", EXIT_LOST))
    if code < 0:  # the run died of a signal: so does this process, for whoever waits on it
        with contextlib.suppress(OSError, ValueError):  # SIGKILL's and SIGSTOP's handlers cannot be set
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code
    return code


def _same_user(connection: socket.socket) -> bool:
    """Whether the process at the other end of ``connection`` is this user's, where the system says."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return True  # the folder, this user's alone, is then the only guard
    _, uid, _ = struct.unpack("iII", connection.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("iII")))
    return bool(uid == os.getuid())


def _exists(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie whose parent died does not: under an init that never reaps, it stays)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _reply(connection: socket.socket) -> dict[str, Any] | None:
    """The warm process's next line; None at its end, or for a line it would never write."""
    line = b""
    while not line.endswith(b"\n"):
        chunk = connection.recv(1)  # one line at a time, and nothing read past it
        if not chunk:
            return None
        line += chunk
    try:
        reply = json.loads(line) if line else None
    except ValueError:
        return None
    return reply if isinstance(reply, dict) else None


def _forward_signals(pid: int) -> None:
    """Signals to this process go to the command's process group, as a terminal's would have; Ctrl-Z stops the
    command's group before this process, and its continuation continues both."""

    def forward(signum: int, _: object) -> None:
        with contextlib.suppress(OSError):  # the run's group gone: its end is on its way
            os.killpg(pid, signum)

    def suspend(_signum: int, _frame: object) -> None:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGTSTP)
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)

    def resume(_signum: int, _frame: object) -> None:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGCONT)
        signal.signal(signal.SIGTSTP, suspend)

    for signum in FORWARDED:
        if signal.getsignal(signum) is not signal.SIG_IGN:  # nohup's SIGHUP, say: the run ignores it too
            signal.signal(signum, forward)
    if signal.getsignal(signal.SIGTSTP) is not signal.SIG_IGN:
        signal.signal(signal.SIGTSTP, suspend)
    signal.signal(signal.SIGCONT, resume)


# The warm process itself.


def serve(argv: list[str]) -> None:
    """Load, then fork a child for each command sent, until idle or stopped. Only one serves a place: the
    lock is held for the process's life (the children close their copy)."""
    place, key, idle = Place(Path(argv[0])), argv[1], float(argv[2])
    lock = place.file(".lock").open("ab")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return
    with contextlib.suppress(OSError):
        os.ftruncate(2, 0)  # the log (this process's standard error) is this process's alone
    for signum in (*FORWARDED, signal.SIGTSTP):  # not the starting command's (nohup's SIGHUP ignored, say)
        signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())  # nor its blocked signals (SIGCHLD, SIGTERM: reaping, --stop)
    # its record, from before it loads: `ifsynth warm [--stop]` finds a process still starting too
    record = {"pid": os.getpid(), "folder": os.getcwd(), "python": sys.executable, "started": time.time()}
    place.file(".json").write_text(json.dumps(record))
    try:
        _preload()
        server = Server(place, key, idle, lock)
    except BaseException:
        place.file(".failed").write_text(key)  # commands of this key run by themselves, and start no other
        place.file(".json").unlink(missing_ok=True)
        raise
    place.file(".failed").unlink(missing_ok=True)
    server.loop()


# What a run imports, in the order it does: ifsynth's modules (the CLI's own module is left to each child: its
# consoles read the terminal as they are made), then what the run's flow and gateway import as they run, read
# from a fully cached rerun's new modules in a child of the warm process.
IFSYNTH_MODULES = (
    "ifsynth.flows.run.runner",
    "ifsynth.flows.run.flows",
    "ifsynth.flows.run.local_prefect",
    "ifsynth.flows.run.pipeline",
    "ifsynth.flows.run.shards",
    "ifsynth.flows.run.tasks",
    "ifsynth.flows.cli.progress",
    "ifsynth.flows.cli.watch",
)
LIBRARIES = (
    "typer",
    "openai",  # the gateway's, loaded on a run's first request
    "aiohttp",
    "prefect.flow_engine",
    "prefect.task_engine",
    "prefect.concurrency.v1.context",
    "prefect.utilities.visualization",
    "pydantic.v1",
    "httpcore2",
    "anyio._backends._asyncio",
    "truststore",
    "encodings.idna",
    "numpy.ma",
    "rich._emoji_codes",
    "typer._adapters",
)


def _preload() -> None:
    """Import what a run imports; Prefect once its quiet defaults are set, as a run does."""
    import importlib
    import pkgutil

    from ifsynth.flows.run import runner

    runner.quiet_prefect()
    for name in IFSYNTH_MODULES:
        importlib.import_module(name)
    recipes = importlib.import_module("ifsynth.flows.recipes")
    for found in pkgutil.walk_packages(recipes.__path__, recipes.__name__ + "."):
        importlib.import_module(found.name)
    for name in LIBRARIES:
        with contextlib.suppress(ImportError):  # another version of a library may have no module of that name
            importlib.import_module(name)


def _ahead() -> bool:
    """What each run would make the same way, made here once, before runs are forked: the TLS context
    (flows/llm/route.py, ``tls``) and Prefect's settings for the local server (flows/run/prefect_api.py,
    ``prepare``). Whether the settings are made, or need not be tried again: the local server is often
    started by the command that started this process, after this process has loaded, so the loop tries
    again while no command runs. Whatever fails here, a run makes for itself, and says why."""
    from ifsynth.flows.llm.route import tls
    from ifsynth.flows.run.prefect_api import prepare

    try:
        tls()
    except Exception as exc:
        _log(f"TLS context not made ahead: {type(exc).__name__}: {exc}")
    try:
        return prepare()
    except Exception as exc:  # not tried again: the same settings would fail the same way
        _log(f"Prefect's settings not made ahead: {type(exc).__name__}: {exc}")
        return True


class Child:
    """A run forked for a command: the command's connection (None once it is gone), and the pipe's end that
    lets the run begin (None once it has)."""

    def __init__(self, connection: socket.socket | None, go: int | None) -> None:
        self.connection, self.go = connection, go

    def close_go(self) -> None:
        """Close this process's end of the run's pipe: a run that has not begun then never does."""
        if self.go is not None:
            with contextlib.suppress(OSError):
                os.close(self.go)
            self.go = None


class Server:
    def __init__(self, place: Place, key: str, idle: float, lock: Any) -> None:
        self.place, self.key, self.idle, self.lock = place, key, idle, lock
        self.children: dict[int, Child] = {}
        self.retiring = False
        self.idled = False
        self.listener: socket.socket | None = self._listen()
        self.last = time.monotonic()
        self.ready = _ahead()  # see _ahead

    def _listen(self) -> socket.socket:
        """The socket, bound under a new name and renamed into place: a command finds a socket that accepts
        or none."""
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        fresh = self.place.file(f".{os.getpid()}.sock")
        fresh.unlink(missing_ok=True)
        listener.bind(str(fresh))
        listener.listen(64)
        os.replace(fresh, self.place.file(".sock"))
        self.inode = os.stat(self.place.file(".sock")).st_ino
        return listener

    def retire(self, why: str) -> None:
        """Take no more commands and let another warm process start here; the children's ends are still
        reported to their commands before this process exits."""
        if self.listener is None:
            return
        with contextlib.suppress(OSError):
            if os.stat(self.place.file(".sock")).st_ino == self.inode:
                self.place.file(".sock").unlink()
                self.place.file(".json").unlink(missing_ok=True)
        self.selector.unregister(self.listener)
        self.listener.close()
        self.listener = None
        self.lock.close()
        _log(f"retired ({why}); {len(self.children)} commands to see to their end")

    def loop(self) -> None:
        import selectors

        self.selector = selectors.DefaultSelector()
        wake_read, wake_write = os.pipe()
        os.set_blocking(wake_write, False)
        os.set_blocking(wake_read, False)
        signal.set_wakeup_fd(wake_write)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "retiring", True))
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        self.wake = (wake_read, wake_write)
        assert self.listener is not None
        self.selector.register(self.listener, selectors.EVENT_READ, "accept")
        self.selector.register(wake_read, selectors.EVENT_READ, "signal")
        _log(f"process {os.getpid()} serves runs in {os.getcwd()} with {sys.executable}")
        while True:
            if self.retiring:
                self.retire("idle" if self.idled else "stopped")
            if self.listener is None and not self.children:
                return
            wait: float | None = None  # with children: until one of them (or a command) is heard
            if not self.children:
                wait = max(0.0, self.last + self.idle - time.monotonic())
                if not self.ready:
                    wait = min(wait, READY_SECONDS)
            events = self.selector.select(wait)
            if not events and not self.children:
                if time.monotonic() - self.last >= self.idle:
                    self.retiring = self.idled = True
                elif not self.ready:
                    self.ready = _ahead()
            for event, _ in events:
                if event.data == "accept" and self.listener is not None:
                    self._accept()
                elif event.data == "signal":
                    with contextlib.suppress(BlockingIOError):
                        os.read(wake_read, 512)
                    self._reap()
                    if not self.children and self.listener is not None:
                        self.ready = _ahead()
                elif isinstance(event.data, int) and event.data in self.children:
                    self._heard(event.data)

    def _accept(self) -> None:
        """Take one command: fork its run, or, for another key, retire. Whatever goes wrong with one command
        (a malformed request, a caller gone, a fork refused) is that command's alone: it gets no pid and runs
        by itself, and this process goes on."""
        assert self.listener is not None
        try:
            connection, _ = self.listener.accept()
        except OSError:
            return
        fds: list[int] = []
        try:
            connection.settimeout(5)
            if not _same_user(connection):
                raise PermissionError("a command of another user")
            request, fds = _receive(connection)
            self._fork(connection, request, fds)
        except Exception as exc:
            _log(f"a command refused: {type(exc).__name__}: {exc}")
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            connection.close()

    def _fork(self, connection: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
        if request.get("key") != self.key:
            for fd in fds:
                os.close(fd)
            # before the answer: the command then starts the warm process of its own key
            self.retire("a command of another environment or code came")
            with contextlib.suppress(OSError):
                connection.sendall(b'{"stale": true}\n')
            connection.close()
            return
        connection.setblocking(False)
        try:  # a caller gone already (killed as it waited) gets no run: nobody would wait for it
            if connection.recv(1, socket.MSG_PEEK) == b"":
                raise ConnectionAbortedError("the command left before its run began")
        except BlockingIOError:
            pass
        sys.stdout.flush()
        sys.stderr.flush()
        go_read, go_write = os.pipe()
        held = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)  # the child's until it has the command's handlers
        # the child's collections leave what was here before it alone: the full one each child ran soon after it
        # began touched the header of every object loaded, and so copied every page they are on (0.15 s of each
        # command, bench/README.md)
        gc.freeze()
        try:
            pid = os.fork()
        except BaseException:  # no child (a process limit, no memory): this process as it was
            gc.unfreeze()
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
            os.close(go_read)
            os.close(go_write)
            raise
        if pid == 0:
            os.close(go_write)
            self._become(request, fds, connection, go_read)
        gc.unfreeze()  # this process's own objects back in its oldest generation: collected as before
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        os.close(go_read)
        child = self.children[pid] = Child(connection, go_write)
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        fds.clear()
        try:  # from here on, whatever fails is this child's end, never a command run twice
            import selectors

            self.selector.register(connection, selectors.EVENT_READ, pid)
            with contextlib.suppress(OSError):  # here as in the child: a signal to the group never misses it
                os.setpgid(pid, pid)
            self.last = time.monotonic()
            _log(f"command {pid} started")
            connection.sendall(json.dumps({"pid": pid}).encode() + b"\n")  # a few bytes: the buffer takes them
        except Exception as exc:
            self._gone(pid, child, f"not begun ({type(exc).__name__}: {exc})")

    def _become(self, request: dict[str, Any], fds: list[int], connection: socket.socket, go: int) -> NoReturn:
        """In the child: drop the warm process's files and handlers, take on the command's, wait for the
        command's word, and run it. Signals are held until then: one sent to the run meets its own handlers."""
        try:
            signal.set_wakeup_fd(-1)
            ignored = set(request.get("ignored", ()))
            for signum in signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}:
                default = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
                with contextlib.suppress(OSError, ValueError):  # as the command has them (nohup's SIGHUP)
                    signal.signal(signum, signal.SIG_IGN if signum in ignored else default)
            main = sys.modules["__main__"]  # click names the program from it, in its help
            main.__package__ = request.get("main_package")
            self.selector.close()
            for held in [self.listener, connection, *(child.connection for child in self.children.values())]:
                if held is not None:
                    held.close()
            for child in self.children.values():
                child.close_go()
            self.lock.close()
            for fd in self.wake:
                os.close(fd)
            os.setpgid(0, 0)
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            os.chdir(request["cwd"])
            os.umask(request["umask"])
            os.environ.clear()
            os.environ.update(request["env"])
            sys.argv[:] = request["argv"]
            sys.path[:] = request["path"]
            # new stream objects, as the interpreter's start makes them: the warm process's were made for its
            # own files (a log: seekable, not a terminal), which the objects remember
            for fd, name, settings in zip((0, 1, 2), ("stdin", "stdout", "stderr"), request["streams"], strict=True):
                if settings is not None:
                    encoding, errors, line_buffering, write_through = settings
                    stream = open(fd, "r" if fd == 0 else "w", encoding=encoding, errors=errors, closefd=False)  # noqa: SIM115
                    stream.reconfigure(line_buffering=line_buffering, write_through=write_through)
                    setattr(sys, name, stream)
                    setattr(sys, f"__{name}__", stream)
            if os.read(go, 1) != GO:  # the command left, or the warm process died, before it sent its word
                os._exit(EXIT_LOST)
            os.close(go)
            # the command's own mask (what came meanwhile is handled now)
            signal.pthread_sigmask(signal.SIG_SETMASK, request.get("blocked", ()))
            from ifsynth.flows.cli.app import script as cold

            cold()
        except KeyboardInterrupt:  # Ctrl-C before the command's own handling of it
            os._exit(128 + signal.SIGINT)
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            os._exit(EXIT_LOST)

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = self.children.pop(pid, None)
            if child is None:
                continue
            self.last = time.monotonic()
            code = os.waitstatus_to_exitcode(status)
            _log(f"command {pid} ended: {f'signal {-code}' if code < 0 else f'exit {code}'}")
            child.close_go()
            if child.connection is None:
                continue
            self.selector.unregister(child.connection)
            with contextlib.suppress(OSError):
                child.connection.setblocking(True)
                child.connection.sendall(json.dumps({"exit": code}).encode() + b"\n")
            child.connection.close()

    def _heard(self, pid: int) -> None:
        """A command's connection became readable: its word that the run may begin, or its end (killed with
        SIGKILL, its forwarding dead with it; or gone before it sent the word). Its run goes the same way."""
        child = self.children[pid]
        assert child.connection is not None
        try:
            word = child.connection.recv(1)
        except BlockingIOError:
            return
        except OSError:  # reset: gone all the same
            word = b""
        if word == GO and child.go is not None:
            with contextlib.suppress(OSError):  # a child already gone (killed) reads nothing
                os.write(child.go, GO)
            child.close_go()
        elif not word:
            self._gone(pid, child, f"lost its caller: {'killed' if child.go is None else 'it had not begun'}")

    def _gone(self, pid: int, child: Child, why: str) -> None:
        """The command of ``child`` is gone, or cannot be told its run's pid: the run goes too. Its pipe's end
        first, which alone keeps a run that has not begun from ever beginning; nothing here raises."""
        child.close_go()
        if child.connection is not None:
            with contextlib.suppress(KeyError, ValueError):  # not registered yet
                self.selector.unregister(child.connection)
            child.connection.close()
            child.connection = None
        _log(f"command {pid} {why}")
        _kill_group(pid)


def _log(line: str) -> None:
    """A line of the warm process's log (its standard error): which commands it ran, never what they were.
    Written unbuffered: a log that cannot be written (a full disk) loses its line, and leaves nothing in a
    buffer that a forked run would inherit."""
    with contextlib.suppress(OSError):
        os.write(2, f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n".encode())


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _receive(connection: socket.socket) -> tuple[dict[str, Any], list[int]]:
    data, fds, _, _ = socket.recv_fds(connection, 1 << 16, 3)
    if len(fds) != 3 or len(data) < 4:
        for fd in fds:
            os.close(fd)
        raise ValueError("not a command")
    (size,) = struct.unpack("!I", data[:4])
    data = data[4:]
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    try:
        return json.loads(data), fds
    except ValueError:
        for fd in fds:
            os.close(fd)
        raise


# What `ifsynth warm` shows and stops.


class Warm(NamedTuple):
    pid: int
    folder: str
    python: str
    started: float


def running() -> list[Warm]:
    """This user's warm processes, one per interpreter and folder."""
    folder = Place.folder()
    found = []
    for record in sorted(folder.glob("*.json")) if folder else []:
        try:
            warm = Warm(**json.loads(record.read_text()))
        except (OSError, ValueError, TypeError):
            continue
        if _alive(warm.pid):
            found.append(warm)
    return found


def stop() -> list[Warm]:
    """Stop every warm process of this user; each ends once the commands it runs have."""
    stopped = running()
    for warm in stopped:
        with contextlib.suppress(ProcessLookupError):
            os.kill(warm.pid, signal.SIGTERM)
    return stopped


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a warm process (a record outlives a process killed with SIGKILL, and its pid may
    since be another program's)."""
    if not Path("/proc/self").exists():  # no /proc: the record is taken at its word
        return _exists(pid)
    try:  # a warm process leads its session; the runs it forked, which share its command line, do not
        return MODULE.encode() in Path(f"/proc/{pid}/cmdline").read_bytes() and os.getsid(pid) == pid
    except OSError:
        return False


if __name__ == "__main__":
    serve(sys.argv[1:])
