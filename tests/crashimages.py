"""Crash images of a ledger: run real writers, in real processes, through a recording layer,
then rebuild what a power cut or a SIGKILL after any recorded step could leave on disk.

Recording. The ledger changes the disk only through gpupoolctl.ledger.fileio (file contents,
new files, renames, syncs of files and folders). `Recorder` replaces those functions and
writes every call, in one global order, to an event log shared by forked writer processes;
the writers' own code runs unchanged (real flock, real files, real compaction). A sync is
recorded but not performed: durability is what the images model, and skipping the real
fdatasync keeps a run fast. A writer may be SIGKILLed by a plan (`Kill`): just before one of
its calls, just after it, or half-way through a write; the kernel then drops its locks,
and the other writers (and any replacement started after the death) go on.

The model of a power cut after step i (`DiskAt.crash`):
* files: what a file held when its last completed sync began is there, exactly. Every
  512-byte sector changed since holds one of the versions it had since then (that old
  content, zeros where the file was shorter, or the content after any later write), or a
  prefix of one with the old content after it; the file's size is any size it had since,
  or anything between the smallest and the largest. The watermark's one-sector writes land
  whole (no torn prefix).
* folders: the names a folder held when its last completed fsync began are there; of the
  creates, renames and removals since, a prefix (in order: metadata is journaled in order)
  survived. A file whose name did not survive is gone, whatever was synced in it.
A SIGKILL of every writer after step i (`DiskAt.killed`) loses nothing: the page cache
survives, so every write and every name is there as written.

Not modelled: the ledger's folder itself (made before the run), the lock file (no data),
bit rot of bytes a sync covered, lying disks (a sync that returns before the data is on
stable storage), and ledgers opened `durable=False` (no promise to keep).
"""

from __future__ import annotations

import fcntl
import os
import pickle
import random
import shutil
import signal
import struct
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpupoolctl.ledger import Ledger, LedgerDamaged, LedgerError, fileio, watermark
from gpupoolctl.ledger.paths import LedgerPaths

SECTOR = 512
SYNC_PAUSE_S = 0.002  # long enough for other writers to append behind a sync
_PATCHED = (
    "append",
    "write_at",
    "sync",
    "truncate",
    "open_file",
    "create_temp",
    "make_dir",
    "rename",
    "unlink",
    "sync_dir",
)


# -- recording ------------------------------------------------------------------------------


@dataclass
class Event:
    """One recorded step. Files are named by (dev, ino) as the run saw them; folder steps
    by the folder's path and the names in it."""

    kind: str  # write truncate sync-begin sync-end | create mkdir rename unlink
    # dirsync-begin dirsync-end | ack (a writer's call returned) | killed (name: how and
    # which call) | died (the parent saw it die)
    writer: int = 0
    dev: int = 0
    ino: int = 0
    folder: str = ""
    name: str = ""
    name2: str = ""  # rename: the new name
    offset: int = 0
    data: bytes = b""
    token: int = 0  # pairs a sync's begin and end
    records: list[dict[str, Any]] = field(default_factory=list)


class EventLog:
    """Events appended to one file under its own flock: the order in the file is the order
    the steps happened in, across processes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = -1
        self._pid = 0

    def _descriptor(self) -> int:
        if self._pid != os.getpid():  # a forked writer locks through its own open file
            self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            self._pid = os.getpid()
        return self._fd

    @contextmanager
    def locked(self) -> Iterator[None]:
        fd = self._descriptor()
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def add(self, event: Event) -> None:
        """Under `locked`."""
        body = pickle.dumps(event)
        os.write(self._descriptor(), struct.pack("<I", len(body)) + body)

    def read(self) -> list[Event]:
        data = self.path.read_bytes()
        events, pos = [], 0
        while pos + 4 <= len(data):
            (size,) = struct.unpack_from("<I", data, pos)
            events.append(pickle.loads(data[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        return events


@dataclass(frozen=True)
class Kill:
    """SIGKILL a writer at its `at`-th recorded call: "before" it, "after" it, or (a write)
    "partial": part of the data written, then the kill. With `call`, only the calls it names
    count: a kind ("write", "truncate", "sync", "dirsync", "create", "mkdir", "rename",
    "unlink") or a kind and a name ("rename ledger.jsonl": the new name; "create
    .ledger.jsonl.": a temp file's prefix)."""

    at: int
    how: str = "after"
    call: str = ""


class Recorder:
    """Replaces gpupoolctl.ledger.fileio's functions with recording ones (`installed`)."""

    def __init__(self, log: EventLog) -> None:
        self.log = log
        self.writer = 0
        self.kill: Kill | None = None
        self.calls = 0
        self.rng = random.Random(0)
        self._real: dict[str, Callable[..., Any]] = {}
        self._tokens = 0
        self._call = ""

    @contextmanager
    def installed(self) -> Iterator[Recorder]:
        self._real = {name: getattr(fileio, name) for name in _PATCHED}
        for name in _PATCHED:
            setattr(fileio, name, getattr(self, name))
        try:
            yield self
        finally:
            for name, real in self._real.items():
                setattr(fileio, name, real)

    def become(self, writer: int, kill: Kill | None, seed: int) -> None:
        """In a forked writer: who it is and when it dies."""
        self.writer, self.kill, self.calls = writer, kill, 0
        self.rng = random.Random(seed)

    # Each call: under the log's lock, do it for real and record it, so that the log's
    # order is the order of the steps on disk.
    def _due(self, call: str) -> str | None:
        if self.kill is None or self.kill.call not in ("", call, call.split(" ")[0]):
            return None
        self.calls += 1
        if self.calls != self.kill.at:
            return None
        self._call = call
        return self.kill.how

    def _die(self) -> None:
        """SIGKILL this writer (under the log's lock: the kernel lets go of it)."""
        assert self.kill is not None
        self._add("killed", name=f"{self.kill.how} {self._call}")
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)  # not reached

    def _add(self, kind: str, **fields: Any) -> None:
        self.log.add(Event(kind, writer=self.writer, **fields))

    def _write(self, fd: int, data: bytes, offset: int | None) -> None:
        with self.log.locked():
            st = os.fstat(fd)
            at = st.st_size if offset is None else offset
            due = self._due("write")
            if due == "before":
                self._die()
            if due == "partial" and len(data) > 1:
                data = bytes(data)[: self.rng.randrange(1, len(data))]
            if offset is None:
                self._real["append"](fd, data)
            else:
                self._real["write_at"](fd, data, offset)
            self._add("write", dev=st.st_dev, ino=st.st_ino, offset=at, data=bytes(data))
            if due:
                self._die()

    def append(self, fd: int, data: bytes) -> None:
        self._write(fd, data, None)

    def write_at(self, fd: int, data: bytes, offset: int) -> None:
        self._write(fd, data, offset)

    def truncate(self, fd: int, size: int) -> None:
        with self.log.locked():
            st = os.fstat(fd)
            due = self._due("truncate")
            if due == "before":
                self._die()
            self._real["truncate"](fd, size)
            self._add("truncate", dev=st.st_dev, ino=st.st_ino, offset=size)
            if due:
                self._die()

    def _synced(self, kind: str, perform: Callable[[], None], **fields: Any) -> None:
        """A sync covers what was there when it began and is complete when it returns:
        recorded as two steps, with a pause between them in which others may write."""
        with self.log.locked():
            due = self._due(kind)
            if due == "before":
                self._die()
            self._tokens += 1
            token = self.writer * 1_000_000 + self._tokens
            self._add(f"{kind}-begin", token=token, **fields)
        time.sleep(SYNC_PAUSE_S)
        with self.log.locked():
            perform()
            self._add(f"{kind}-end", token=token, **fields)
            if due:
                self._die()

    def sync(self, fd: int) -> None:
        st = os.fstat(fd)
        self._synced("sync", lambda: None, dev=st.st_dev, ino=st.st_ino)

    def sync_dir(self, folder: Path) -> None:
        self._synced("dirsync", lambda: None, folder=str(folder))

    def _named(self, kind: str, path: Path, perform: Callable[[], Any], **fields: Any) -> Any:
        with self.log.locked():
            due = self._due(f"{kind} {fields.get('name2') or path.name}")
            if due == "before":
                self._die()
            result = perform()
            self._add(kind, folder=str(path.parent), name=path.name, **fields)
            if due:
                self._die()
            return result

    def open_file(self, path: Path, flags: int, mode: int) -> int:
        if not flags & os.O_CREAT:
            return self._real["open_file"](path, flags, mode)
        with self.log.locked():
            existed = os.path.lexists(path)
            due = None if existed else self._due(f"create {path.name}")
            if due == "before":
                self._die()
            fd = self._real["open_file"](path, flags, mode)
            if not existed:
                self._created(fd, path, due)
            return fd

    def _created(self, fd: int, path: Path, due: str | None) -> None:
        st = os.fstat(fd)
        self._add("create", folder=str(path.parent), name=path.name, dev=st.st_dev, ino=st.st_ino)
        if due:
            self._die()

    def create_temp(self, folder: Path, prefix: str) -> tuple[int, Path]:
        with self.log.locked():
            due = self._due(f"create {prefix}")
            if due == "before":
                self._die()
            fd, path = self._real["create_temp"](folder, prefix)
            self._created(fd, path, due)
        return fd, path

    def make_dir(self, path: Path, mode: int) -> None:
        self._named("mkdir", path, lambda: self._real["make_dir"](path, mode))

    def rename(self, src: Path, dst: Path) -> None:
        assert src.parent == dst.parent
        self._named("rename", src, lambda: self._real["rename"](src, dst), name2=dst.name)

    def unlink(self, path: Path) -> None:
        self._named("unlink", path, lambda: self._real["unlink"](path))

    def ack(self, records: list[dict[str, Any]]) -> None:
        """A writer's call returned: its records are acknowledged from here on."""
        with self.log.locked():
            self._add("ack", records=[dict(r) for r in records])

    def adopt(self, folder: Path) -> None:
        """Record the files already in `folder` (and its subfolders) as written, synced and
        named durably: a run that starts from an image."""
        with self.log.locked():
            for path in sorted(folder.rglob("*")):
                where = dict(folder=str(path.parent), name=path.name)
                if path.is_dir():
                    self._add("mkdir", **where)
                    continue
                st = path.stat()
                ident = dict(dev=st.st_dev, ino=st.st_ino)
                self._add("create", **where, **ident)
                self._add("write", data=path.read_bytes(), **ident)
                self._add("sync-begin", token=-st.st_ino, **ident)
                self._add("sync-end", token=-st.st_ino, **ident)
            for number, sub in enumerate([folder, *sorted(folder.rglob("*"))]):
                if sub.is_dir():
                    self._add("dirsync-begin", folder=str(sub), token=-1 - number)
                    self._add("dirsync-end", folder=str(sub), token=-1 - number)


@dataclass(frozen=True)
class Writer:
    """What one forked writer does (`work(index)`) and whether a plan kills it."""

    work: Callable[[int], None]
    kill: Kill | None = None


@dataclass
class Exit:
    writer: int
    status: int  # 0 done, -9 SIGKILLed, 1 raised
    error: str = ""


def run_writers(
    recorder: Recorder, writers: list[Writer], seed: int, replace: Writer | None = None
) -> list[Exit]:
    """Fork every writer and wait for all; each one SIGKILLed is followed by `replace`
    (started after the death, as a person would run the command again)."""
    errors = recorder.log.path.with_suffix(".errors")
    running: dict[int, int] = {}

    def start(index: int, writer: Writer) -> None:
        pid = os.fork()
        if pid == 0:  # the writer
            code = 1
            try:
                recorder.become(index, writer.kill, seed * 1000 + index)
                writer.work(index)
                code = 0
            except BaseException:
                with open(f"{errors}.{index}", "w") as out:
                    out.write(traceback.format_exc())
            finally:
                os._exit(code)
        running[pid] = index

    for index, writer in enumerate(writers):
        start(index, writer)
    exits: list[Exit] = []
    while running:
        pid, status = os.waitpid(-1, 0)
        index = running.pop(pid)
        code = os.waitstatus_to_exitcode(status)
        error_file = Path(f"{errors}.{index}")
        error = error_file.read_text() if error_file.exists() else ""
        exits.append(Exit(index, code, error))
        if code == -signal.SIGKILL:
            with recorder.log.locked():
                recorder.log.add(Event("died", writer=index))
            if replace is not None:
                start(len(writers) + len(exits), replace)
    return exits


# -- the model ------------------------------------------------------------------------------


@dataclass
class _File:
    content: bytearray = field(default_factory=bytearray)
    changes: list[tuple[str, int, bytes]] = field(default_factory=list)  # write / truncate
    durable: bytes = b""  # as of the begin of its last completed sync
    durable_at: int = 0  # len(changes) then
    one_sector: bool = False  # the watermark: its writes land whole


@dataclass
class _Folder:
    entries: dict[str, Any] = field(default_factory=dict)  # name -> file id | ("dir", key)
    ops: list[tuple[str, str, Any]] = field(default_factory=list)  # create/rename/unlink/mkdir
    durable: dict[str, Any] = field(default_factory=dict)
    durable_at: int = 0


def _apply_op(entries: dict[str, Any], op: tuple[str, str, Any]) -> None:
    kind, name, arg = op
    if kind in ("create", "mkdir"):
        entries[name] = arg
    elif kind == "rename":
        if name in entries:
            entries[arg] = entries.pop(name)
    elif kind == "unlink":
        entries.pop(name, None)


@dataclass
class Image:
    """What a folder holds after a crash: relative path -> bytes (folders as None)."""

    files: dict[str, bytes | None]
    ids: dict[str, int]  # relative path -> the run's file id (to map the watermark)
    marks: dict[bytes, int | None]  # watermark line -> the file id it named

    def write(self, folder: Path, journal_name: str) -> LedgerPaths:
        """The image as files in `folder` (new); the watermark is rewritten to name the
        image's journal when it named the file that is now the journal, and nothing
        otherwise (the image's files have new inode numbers)."""
        folder.mkdir(parents=True)
        for rel in sorted(self.files):
            data = self.files[rel]
            target = folder / rel
            if data is None:
                target.mkdir(mode=0o700)
            elif target.parent.is_dir():
                target.write_bytes(data)
                os.chmod(target, 0o600)
        paths = LedgerPaths(folder / journal_name)
        mark_rel = paths.watermark.name
        raw = self.files.get(mark_rel)
        mark = watermark.decode(raw) if raw else None
        if mark is not None:
            assert raw is not None
            named = self.marks.get(raw[: watermark.SIZE])
            if named is not None and named == self.ids.get(journal_name):
                st = os.stat(paths.journal)
                dev, ino = st.st_dev, st.st_ino
            else:
                dev, ino = 0, 0
            fixed = watermark.Mark(dev, ino, mark.snapshot_seq, mark.end)
            paths.watermark.write_bytes(watermark.encode(fixed) + raw[watermark.SIZE :])
        return paths


class DiskAt:
    """The model's disk after a prefix of the events."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)
        self.files: dict[int, _File] = {}
        self.folders: dict[str, _Folder] = {"": _Folder()}
        self.ids: dict[tuple[int, int], int] = {}
        self.acks: list[dict[str, Any]] = []
        self.marks: dict[bytes, int | None] = {}
        self._stash: dict[int, tuple[Any, int, Any]] = {}

    def _key(self, folder: str) -> str:
        rel = os.path.relpath(folder, self.root)
        return "" if rel == "." else rel

    def _file(self, event: Event) -> _File:
        ident = (event.dev, event.ino)
        if ident not in self.ids:
            self.ids[ident] = self._new(_File())
        return self.files[self.ids[ident]]

    def _new(self, file: _File) -> int:
        number = len(self.files) + 1
        self.files[number] = file
        return number

    def apply(self, event: Event) -> None:
        kind = event.kind
        if kind == "ack":
            self.acks.extend(event.records)
        elif kind == "write":
            f = self._file(event)
            end = event.offset + len(event.data)
            if len(f.content) < end:
                f.content.extend(b"\0" * (end - len(f.content)))
            f.content[event.offset : end] = event.data
            f.changes.append(("write", event.offset, event.data))
            if len(event.data) == watermark.SIZE and watermark.decode(event.data):
                mark = watermark.decode(event.data)
                assert mark is not None
                self.marks[event.data] = self.ids.get((mark.dev, mark.ino))
        elif kind == "truncate":
            f = self._file(event)
            del f.content[event.offset :]
            f.changes.append(("truncate", event.offset, b""))
        elif kind == "sync-begin":
            f = self._file(event)
            self._stash[event.token] = (f, len(f.changes), bytes(f.content))
        elif kind == "sync-end":
            f, at, content = self._stash.pop(event.token)
            if at >= f.durable_at:
                f.durable, f.durable_at = content, at
        elif kind in ("create", "mkdir", "rename", "unlink"):
            folder = self.folders.setdefault(self._key(event.folder), _Folder())
            if kind == "create":
                ident = (event.dev, event.ino)  # a new file, even on a reused inode
                self.ids[ident] = self._new(_File(one_sector=event.name.endswith(".synced")))
                op: tuple[str, str, Any] = ("create", event.name, self.ids[ident])
            elif kind == "mkdir":
                key = self._key(os.path.join(event.folder, event.name))
                self.folders.setdefault(key, _Folder())
                op = ("mkdir", event.name, ("dir", key))
            elif kind == "rename":
                op = ("rename", event.name, event.name2)
            else:
                op = ("unlink", event.name, None)
            folder.ops.append(op)
            _apply_op(folder.entries, op)
        elif kind == "dirsync-begin":
            folder = self.folders.setdefault(self._key(event.folder), _Folder())
            self._stash[event.token] = (folder, len(folder.ops), dict(folder.entries))
        elif kind == "dirsync-end":
            folder, at, entries = self._stash.pop(event.token)
            if at >= folder.durable_at:
                folder.durable, folder.durable_at = entries, at

    # -- images --

    def killed(self) -> Image:
        """Every writer SIGKILLed here: all that was written is there."""
        return self._image(lambda folder: dict(folder.entries), lambda f: bytes(f.content))

    def synced_only(self) -> Image:
        """The harshest power cut here: of every folder only what its last fsync covered,
        of every file only what its last sync covered."""
        return self._image(lambda folder: dict(folder.durable), lambda f: f.durable)

    def crash(self, rng: random.Random) -> Image:
        """A power cut here (module docstring: the model)."""

        def names(folder: _Folder) -> dict[str, Any]:
            entries = dict(folder.durable)
            pending = folder.ops[folder.durable_at :]
            for op in pending[: rng.randint(0, len(pending))]:
                _apply_op(entries, op)
            return entries

        return self._image(names, lambda f: _crash_content(f, rng))

    def _image(
        self, names: Callable[[_Folder], dict[str, Any]], content: Callable[[_File], bytes]
    ) -> Image:
        files: dict[str, bytes | None] = {}
        ids: dict[str, int] = {}

        def walk(key: str, prefix: str) -> None:
            for name, target in sorted(names(self.folders[key]).items()):
                rel = prefix + name
                if isinstance(target, tuple):
                    files[rel] = None
                    walk(target[1], rel + "/")
                else:
                    files[rel] = content(self.files[target])
                    ids[rel] = target

        walk("", "")
        return Image(files, ids, self.marks)

    def live(self, name: str) -> bytes:
        """The content of the file now at `name` in the ledger's folder (no crash)."""
        target = self.folders[""].entries[name]
        return bytes(self.files[target].content)


def _crash_content(f: _File, rng: random.Random) -> bytes:
    pending = f.changes[f.durable_at :]
    if not pending:
        return f.durable
    current = bytearray(f.durable)
    sizes = [len(current)]
    versions: dict[int, list[bytes]] = {}

    def keep(first: int, last: int) -> None:
        for sector in range(first, last + 1):
            chunk = bytes(current[sector * SECTOR : (sector + 1) * SECTOR])
            versions.setdefault(sector, []).append(chunk.ljust(SECTOR, b"\0"))

    for kind, offset, data in pending:
        if kind == "write":
            end = offset + len(data)
            if len(current) < end:
                current.extend(b"\0" * (end - len(current)))
            current[offset:end] = data
            if data:
                keep(offset // SECTOR, (end - 1) // SECTOR)
        else:
            old = len(current)
            del current[offset:]
            if old > offset:
                keep(offset // SECTOR, (old - 1) // SECTOR)
        sizes.append(len(current))
    size = rng.choice(sizes) if rng.random() < 0.5 else rng.randint(min(sizes), max(sizes))
    base = bytearray(f.durable.ljust(max(sizes), b"\0"))
    image = bytearray(base)
    for sector, chunks in versions.items():
        old = bytes(base[sector * SECTOR : (sector + 1) * SECTOR]).ljust(SECTOR, b"\0")
        fate = rng.random()
        if fate < 0.45:
            chunk = chunks[-1]  # arrived
        elif fate < 0.75:
            chunk = old  # did not arrive
        else:
            chunk = rng.choice(chunks)  # an earlier version
            if not f.one_sector and rng.random() < 0.5:
                cut = rng.randrange(SECTOR)
                chunk = chunk[:cut] + old[cut:]  # arrived in part
        image[sector * SECTOR : (sector + 1) * SECTOR] = chunk
    return bytes(image[:size])


def replay(events: list[Event], root: Path, upto: int) -> DiskAt:
    """The model's disk after events[:upto]."""
    disk = DiskAt(root)
    for event in events[:upto]:
        disk.apply(event)
    return disk


def replays(events: list[Event], root: Path, steps: list[int]) -> Iterator[tuple[int, DiskAt]]:
    """(step, disk after events[:step]) for ascending steps, replaying once."""
    disk = DiskAt(root)
    done = 0
    for step in steps:
        for event in events[done:step]:
            disk.apply(event)
        done = step
        yield step, disk


# -- checking an image ----------------------------------------------------------------------


@dataclass
class Outcome:
    """What an image gave: verify's verdict on it as found, the next writer's fate, verify
    after that write, and what became of the acknowledged records."""

    verdict: tuple[str, ...]
    recovery: str  # ok | refused: ... | error: ...
    after: tuple[str, ...]
    lost: list[int]
    changed: list[int]
    seq_holes: list[int]
    double_booked: list[str]

    @property
    def ok(self) -> bool:
        return (
            set(self.verdict) <= {"torn"}
            and self.recovery == "ok"
            and not self.after
            and not (self.lost or self.changed or self.seq_holes or self.double_booked)
        )


def kinds(led: Ledger) -> tuple[str, ...]:
    if not led.paths.exists():
        return ("absent",)
    try:
        return tuple(sorted(p.kind for p in led.verify(deep=True).problems))
    except (LedgerError, LedgerDamaged) as exc:
        return (f"error: {exc}",)


def check_image(
    paths: LedgerPaths, acked: list[dict[str, Any]], next_write: Callable[[Any], None]
) -> Outcome:
    led = Ledger(paths.journal, durable=True, actor="next@h", autocompact=0)
    found = kinds(led)
    verdict = () if found == ("absent",) and not acked else found
    try:
        led.write(next_write)
        recovery = "ok"
    except LedgerDamaged as exc:
        recovery = f"refused: {exc}"
    except (LedgerError, OSError) as exc:
        recovery = f"error: {exc}"
    after = kinds(led)
    try:
        records = led.history(everything=True).records if paths.exists() else []
    except (LedgerError, LedgerDamaged) as exc:
        recovery += f"; history unreadable: {exc}"
        records = []
    got = {r["seq"]: r for r in records}
    lost = sorted({r["seq"] for r in acked} - set(got))
    changed = sorted(
        r["seq"]
        for r in acked
        if r["seq"] in got
        and {k: got[r["seq"]][k] for k in ("op", "data", "actor")}
        != {k: r[k] for k in ("op", "data", "actor")}
    )
    led.close()
    seqs = [r["seq"] for r in records]
    holes = sorted(set(range(1, max(seqs, default=0) + 1)) - set(seqs))
    return Outcome(verdict, recovery, after, lost, changed, holes, double_booked(records))


def double_booked(records: list[dict[str, Any]]) -> list[str]:
    """Slices an alloc took while another allocation still held them, by replaying holds by
    hand (independent of the library's own checks)."""
    held: dict[str, str] = {}
    twice: list[str] = []
    for record in records:
        data = record["data"]
        if record["op"] == "alloc":
            for slice_id in data["slices"]:
                if slice_id in held:
                    twice.append(f"seq {record['seq']}: {slice_id}")
                held[slice_id] = data["id"]
        elif record["op"] in ("release", "expire"):
            ended = set(data.get("ids", [data.get("id")]))
            held = {k: v for k, v in held.items() if v not in ended}
    return twice


# -- runs of writers ------------------------------------------------------------------------


@dataclass(frozen=True)
class Mix:
    """Writers and what they do: `rounds` of alloc then release each (a hold with a TTL of
    `ttl_ms` half the time, so that expiries make two-record batches), compacting by
    themselves at `autocompact` live records (0: never) and by `ledger compact` every
    `compact_every` rounds (0: never); `kills[i]` SIGKILLs writer i, and a replacement
    starts after each death."""

    writers: int = 3
    rounds: int = 6
    autocompact: int = 0
    ttl_ms: int = 0
    compact_every: int = 0
    kills: tuple[Kill | None, ...] = ()

    def describe(self) -> str:
        killed = [
            f"w{i}@{k.call or 'call'}#{k.at}:{k.how}"
            for i, k in enumerate(self.kills)
            if k is not None
        ]
        return (
            f"{self.writers} writers x {self.rounds} rounds, autocompact {self.autocompact}, "
            f"ttl {self.ttl_ms} ms, compact every {self.compact_every}, "
            f"kills {','.join(killed) or 'none'}"
        )


def random_mix(rng: random.Random) -> Mix:
    """A mix for the long run: concurrent writers, mostly compacting, some SIGKILLed."""
    writers = rng.randint(2, 4)
    kills = tuple(_random_kill(rng) if rng.random() < 0.5 else None for _ in range(writers))
    return Mix(
        writers=writers,
        rounds=rng.randint(3, 8),
        autocompact=rng.choice([0, 2, 3, 5, 8]),
        ttl_ms=rng.choice([0, 0, 20]),
        compact_every=rng.choice([0, 0, 0, 3]),
        kills=kills,
    )


def _random_kill(rng: random.Random) -> Kill:
    """At any call, or (one time in three) at one of the few calls whose order makes
    compaction and a new journal durable: a rename, a folder's fsync, a new file."""
    how = rng.choice(["before", "after", "partial"])
    if rng.random() < 1 / 3:
        return Kill(rng.randint(1, 4), how, rng.choice(["rename", "dirsync", "create"]))
    return Kill(rng.randint(1, 70), how)


def pool(count: int = 12) -> list[dict[str, Any]]:
    return [
        {"id": f"n{i // 4}/gpu{i % 4}", "host": f"n{i // 4}", "kind": "gpu", "profile": None,
         "memory_mib": 40960 + i, "uuid": f"U{i}"}
        for i in range(count)
    ]  # fmt: skip


def next_write(tx: Any) -> None:
    """The next writer after a crash, whatever the image holds: the pool's slices again."""
    tx.append("slices", {"hosts": sorted({s["host"] for s in pool()}), "slices": pool()})


@dataclass
class Run:
    events: list[Event]
    root: Path
    paths: LedgerPaths
    exits: list[Exit]
    mix: Mix


def recorded_run(folder: Path, mix: Mix, seed: int) -> Run:
    """Record `mix` on a new ledger in `folder`/run."""
    from datetime import timedelta

    from gpupoolctl.jobs.alloc import alloc as hold
    from gpupoolctl.ledger import NothingFits
    from gpupoolctl.sched import JobRequest

    root = folder / "run"
    root.mkdir(parents=True)
    path = root / "ledger.jsonl"
    recorder = Recorder(EventLog(folder / "events.log"))

    def work(index: int) -> None:
        rng = random.Random(seed * 7919 + index)
        led = Ledger(path, durable=True, actor=f"w{index}@h", autocompact=mix.autocompact)
        for round_no in range(1, mix.rounds + 1):
            ttl = timedelta(milliseconds=mix.ttl_ms) if mix.ttl_ms and rng.random() < 0.5 else None
            try:
                done = hold(led, JobRequest(), owner=f"w{index}", ttl=ttl)
            except NothingFits:
                continue
            recorder.ack(done.records)
            try:
                released = led.release(done.value.id)
            except LedgerError as exc:
                if "expired" not in str(exc):
                    raise
            else:
                recorder.ack(released.records)
            if mix.compact_every and round_no % mix.compact_every == 0:
                led.compact()

    with recorder.installed():
        setup = Ledger(path, durable=True, actor="setup@h", autocompact=mix.autocompact)
        done = setup.refresh_slices(sorted({s["host"] for s in pool()}), pool())
        recorder.ack(done.records)
        setup.close()
        kills = list(mix.kills) + [None] * mix.writers
        writers = [Writer(work, kills[i]) for i in range(mix.writers)]
        exits = run_writers(recorder, writers, seed, replace=Writer(work))
    return Run(recorder.log.read(), root, LedgerPaths(path), exits, mix)


@dataclass
class Tally:
    """Outcomes of many crash points: verdicts as found, and every point that broke the
    invariant (with what is needed to replay it)."""

    points: int = 0
    verdicts: dict[str, int] = field(default_factory=dict)
    recoveries: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    writer_errors: list[str] = field(default_factory=list)

    def add(self, outcome: Outcome, where: str) -> None:
        self.points += 1
        key = ",".join(sorted(set(outcome.verdict))) or "ok"
        self.verdicts[key] = self.verdicts.get(key, 0) + 1
        how = outcome.recovery.split(":")[0]
        self.recoveries[how] = self.recoveries.get(how, 0) + 1
        if not outcome.ok:
            self.failures.append(f"{where}: {outcome}")


def crash_points(
    folder: Path, run: Run, rng: random.Random, count: int, tally: Tally, label: str
) -> None:
    """`count` random crash points of `run` (a power cut, or one time in ten a SIGKILL of
    every writer), each image checked against the invariant; the run's end is one of them."""
    for exit_ in run.exits:
        if exit_.status not in (0, -signal.SIGKILL):
            tally.writer_errors.append(f"{label} writer {exit_.writer}: {exit_.error}")
    total = len(run.events)
    steps = sorted([total] + [rng.randint(1, total) for _ in range(count - 1)])
    for number, (step, disk) in enumerate(replays(run.events, run.root, steps)):
        killed = rng.random() < 0.1 or (step == total and number == len(steps) - 1)
        image = disk.killed() if killed else disk.crash(rng)
        where = f"{label} step {step}/{total} {'kill' if killed else 'power cut'} #{number}"
        paths = image.write(folder / f"img-{number}", run.paths.journal.name)
        outcome = check_image(paths, disk.acks, next_write)
        tally.add(outcome, f"{where} ({paths.folder})")
        if outcome.ok:
            shutil.rmtree(paths.folder)
