"""All outputs of a run, or none: a small transaction over files.

``reserve`` checks each output path before any work, ``stage`` writes an output's bytes to a
temporary file beside its target, ``commit`` renames them all at the end, and ``abort`` removes
them. Used as a ``with`` block, an :class:`OutputSet` commits on success and
aborts on any exception, a signal's included.

Like the shell's ``>``: a symlink is written through (its target is replaced, the link stays), a
write-protected file is refused, and FIFOs, character devices and ``/dev/fd/N`` are written
directly (no temporary file, no rename, no seek), when staged.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import stat
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import PurePath
from types import TracebackType
from typing import BinaryIO

from segcli.errors import UsageError, WriteError
from segcli.io.formats import BINARY_FORMATS
from segcli.memory import human_bytes
from segcli.signals import checkpoint, closing_after_error, held, streaming_out

TEMP_PREFIX = ".segcli-"

#: A path that names an open descriptor (``/dev/fd/3``, ``/proc/self/fd/1``, what ``/dev/stdout``
#: links to): whatever it points at, it is written in place, never renamed over.
_DESCRIPTOR_PATH = re.compile(r"^/(?:dev/fd|proc/(?P<pid>[^/]+)/fd)/(?P<fd>\d+)$")


@dataclass
class _Output:
    path: str  # as the user gave it: every message names it
    option: str
    target: str  # the file a commit replaces (a symlink's final target), or ``path`` if direct
    direct: bool  # a FIFO or device: written in place when staged, nothing to commit
    mode: int
    identity: tuple[int, int] | None  # (device, inode) of an existing file or FIFO
    owner: tuple[int, int] | None = None  # (uid, gid) of an existing target, kept on replace
    temp: str | None = None  # the staged bytes, until committed or aborted
    #: Where the bytes go, to tell two outputs apart: ``target``, or for a FIFO or descriptor
    #: its path with links resolved up to the descriptor (``/dev/stdout`` is ``/dev/fd/1``);
    #: None for a device named as one (``/dev/null``, ``/dev/tty``), which any output may share.
    place: str | None = None
    terminal: bool = False  # a device that is a terminal: binary formats refuse it
    #: A pipe named by a descriptor (``/dev/stderr`` under ``2>&1 |``): two descriptors into
    #: one pipe are two streams, as on a terminal (stderr carries the summary there anyway).
    pipe_by_descriptor: bool = False


#: Named FIFOs planned as outputs and not opened since: see :func:`release_fifo_readers`.
_unopened_fifos: set[str] = set()


def note_fifo(path: str) -> None:
    """Remember ``path`` for :func:`release_fifo_readers` if it is a named FIFO: called as the
    command line is parsed, so that a run stopped before its outputs are planned (a bad value
    of another option, a folder that is missing) still releases its FIFOs' readers."""
    with contextlib.suppress(OSError):
        if stat.S_ISFIFO(os.stat(path).st_mode) and not _names_descriptor(path):
            _unopened_fifos.add(path)


def release_fifo_readers() -> None:
    """Open and close at once each FIFO output the run never opened, so that a reader waiting
    on it (``gzip < out.fifo``) gets an end of file: the shell's ``>`` opens the FIFO before the
    command runs, and the reader of a failed or interrupted run's FIFO would otherwise wait
    forever. Nothing is written; a FIFO that nobody reads yet is left alone."""
    for path in sorted(_unopened_fifos):
        with contextlib.suppress(OSError):  # ENXIO: no reader
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    _unopened_fifos.clear()


class OutputSet:
    """The outputs of one run, committed together; see the module doc."""

    def __init__(self) -> None:
        self._outputs: dict[str, _Output] = {}
        #: True once every rename is done: an interrupt after it may say the output was written.
        self.committed = False

    def __enter__(self) -> OutputSet:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if kind is None:
            self.commit()
            return
        if issubclass(kind, Exception):  # not a signal's Interrupted, nor Ctrl-C
            closing_after_error()
            checkpoint("closing")
        self.abort()

    def reserve(self, path: str, option: str = "-o") -> None:
        """Check now that ``path`` can be written (WriteError, exit 5, if not) and that no other
        output of the run names the same file (UsageError)."""
        refuse_unfit_name(path, option)
        output = _plan(path, option)
        for other in self._outputs.values():
            if _same_file(output, other):
                raise UsageError(f"{option} {path} is the same file as {other.option} {other.path}")
        if not output.direct:
            # The one sure test that a file can be created there (root ignores a folder's mode,
            # a read-only mount does not); removed at once, so a long run holds no empty file.
            with held():
                os.unlink(_create_temp(output, os.path.dirname(output.target)))
        self._outputs[path] = output

    def refuse_inputs(self, inputs: Mapping[str, str | None]) -> None:
        """A UsageError if an output is one of ``inputs`` (``{option: path}``): replacing a file
        the run reads would destroy it."""
        for option, path in inputs.items():
            if path is None or path == "-":
                continue
            for output in self._outputs.values():
                if not output.direct and _is_same_path(output, path):
                    raise UsageError(
                        f"{output.option} {output.path} is the same file as {option} {path}"
                    )

    def refuse_stdout(self, option: str, stdout: BinaryIO | None = None) -> None:
        """A UsageError if an output is the stdout ``option`` (``-o -``) writes to, by another
        name (``/dev/stdout``) or as the file or FIFO behind it (``stdout``, else sys.stdout)."""
        out = stdout if stdout is not None else getattr(sys.stdout, "buffer", None)
        try:
            fd = out.fileno() if out is not None else -1
            found = os.fstat(fd)
        except (AttributeError, OSError, ValueError):
            return  # not a descriptor (a test's buffer): no path can name it
        identity = None if stat.S_ISCHR(found.st_mode) else (found.st_dev, found.st_ino)
        for output in self._outputs.values():
            same_pipe = output.identity == identity and not output.pipe_by_descriptor
            if output.place == f"/dev/fd/{fd}" or (identity and same_pipe):
                raise UsageError(f"{option} is the same file as {output.option} {output.path}")

    def is_direct(self, path: str) -> bool:
        """Whether ``path`` is written in place (a FIFO or device): no seek, no rename."""
        return self._output(path).direct

    def is_terminal(self, path: str) -> bool:
        """Whether ``path`` is a terminal (``/dev/tty``, ``/dev/stdout`` on one)."""
        return self._output(path).terminal

    @contextlib.contextmanager
    def stage(self, path: str) -> Iterator[BinaryIO]:
        """A binary file for the bytes of ``path``: its temporary file, or the FIFO or device
        itself. OS errors become WriteErrors naming ``path``."""
        output = self._output(path)
        if output.direct:
            name = output.target
            _unopened_fifos.discard(path)  # its reader gets this run's end of file
        else:
            if output.temp is not None:
                raise ValueError(f"{path} is staged twice")
            with held():  # the name is recorded before any signal, so abort() finds it
                output.temp = name = _create_temp(output, os.path.dirname(output.target))
        try:
            with _open_staged(output, name) as handle, _streamed(output.direct):
                yield handle
        except OSError as exc:
            if output.direct and _reader_left(exc):
                raise  # as when stdout's reader leaves: the CLI stops quietly (exit 141)
            reason = _reason(exc)
            if exc.errno is None:  # NumPy's short write: "N requested and M written"
                reason = f"{reason}: {_free_space(name)}"
            raise WriteError(f"{_named(output)}: cannot write ({reason})") from exc
        checkpoint("staged")

    def commit(self) -> None:
        """Rename every temporary file over its target; signals wait until all are done."""
        unstaged = [o.path for o in self._outputs.values() if not o.direct and o.temp is None]
        if unstaged:
            self.abort()
            raise ValueError(f"{', '.join(unstaged)}: reserved but never staged")
        with held():
            for output in self._outputs.values():
                if output.temp is None:
                    continue
                try:
                    _keep_owner(output.temp, output.owner)
                    if output.owner is not None:  # it replaces a file
                        _keep_attributes(output.temp, output.target)
                    os.chmod(output.temp, output.mode)  # after chown, which may clear set-id bits
                    os.replace(output.temp, output.target)
                except OSError as exc:
                    self.abort()
                    raise WriteError(f"{_named(output)}: cannot write ({_reason(exc)})") from exc
                output.temp = None
            self.committed = True
        checkpoint("committed")

    def abort(self) -> None:
        """Remove every temporary file; the targets stay as they were."""
        with held():
            for output in self._outputs.values():
                if output.temp is not None:
                    with contextlib.suppress(OSError):
                        os.unlink(output.temp)
                    output.temp = None

    def _output(self, path: str) -> _Output:
        if path not in self._outputs:
            raise ValueError(f"{path} was not reserved")
        return self._outputs[path]


@contextlib.contextmanager
def atomic_output(path: str) -> Iterator[BinaryIO]:
    """Yield a binary file that replaces ``path`` only if the ``with`` block succeeds.

    One output's :class:`OutputSet`: on any exception, KeyboardInterrupt included, the temporary
    file is removed and an existing ``path`` is left untouched.
    """
    with OutputSet() as outputs:
        outputs.reserve(path)
        with outputs.stage(path) as handle:
            yield handle


def refuse_binary_on_terminal(
    fmt: str,
    path: str,
    outputs: OutputSet | None = None,
    *,
    stdout: BinaryIO | None = None,
) -> None:
    """A WriteError (exit 5) when ``fmt`` is binary and would go to a terminal: stdout for
    ``path`` ``-`` (``stdout``, else ``sys.stdout``), or ``path`` reserved in ``outputs`` when
    it is one (``/dev/tty``, ``/dev/stdout`` on a terminal). Asked before any input is read,
    so a run that cannot write its result does no work."""
    if fmt not in BINARY_FORMATS:
        return
    if path == "-":
        out = stdout if stdout is not None else getattr(sys.stdout, "buffer", None)
        if out is not None and _isatty(out):
            raise WriteError(
                f"refusing to write binary {fmt} to a terminal; redirect stdout or use -o FILE"
            )
        return
    if outputs is not None and outputs.is_terminal(path):
        raise WriteError(
            f"{_named(outputs._output(path))}: refusing to write binary {fmt} to a terminal; "
            "write a file or a pipe, or a text format (csv, tsv, json)"
        )


def _isatty(stream: BinaryIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _streamed(direct: bool) -> contextlib.AbstractContextManager[None]:
    # A FIFO or device takes the bytes as they come: no staging to undo them.
    return streaming_out() if direct else contextlib.nullcontext()


def refuse_unfit_name(path: str, option: str) -> None:
    """A UsageError for a name no output should have: ``''`` (an unset shell variable), which
    would resolve to the working folder, a file to replace nowhere; and a compressed file's
    name (:func:`refuse_compressed_name`)."""
    if not path:
        raise UsageError(f"{option} '': an empty path names no file")
    refuse_compressed_name(path, option)


#: Compressed files' suffixes and the tool that makes each.
COMPRESSORS = {".gz": "gzip", ".bz2": "bzip2", ".zst": "zstd", ".lz4": "lz4", ".xz": "xz"}


def refuse_compressed_name(path: str, option: str) -> None:
    """A UsageError for a file named like a compressed one (``out.csv.gz``): segcli writes
    plain bytes, and the next reader would take them for gzip's. A FIFO or device of that name
    takes the bytes as they are, so it passes."""
    name = PurePath(path)
    compressor = COMPRESSORS.get(name.suffix.lower())
    if compressor is None or path == "-":
        return
    existing = _stat(path, quiet=True)
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        return
    plain = name.stem
    hint = f"write {plain} and compress it afterwards"
    if option == "-o":
        fmt = PurePath(plain).suffix.lstrip(".").lower() or "FORMAT"
        hint += f", or pipe it through {compressor}: -o >({compressor} > {path}) --format {fmt}"
    raise UsageError(
        f"{option} {path}: segcli does not compress, so this name would hold plain bytes; {hint}"
    )


def _plan(path: str, option: str) -> _Output:
    """Where ``path``'s bytes go, checked like the shell's ``>`` would, before any work."""
    existing = _stat(path, option)
    if existing is not None and stat.S_ISDIR(existing.st_mode):
        raise WriteError(f"{option} {path}: is a directory")
    if _names_descriptor(path) or (existing is not None and not stat.S_ISREG(existing.st_mode)):
        return _direct(path, option, existing)
    if path.endswith(os.sep):
        raise WriteError(f"{option} {path}: names a folder (a file name cannot end with /)")
    # The folder as typed, which the kernel resolves part by part as the shell's > would
    # ("missing/../out.npy" fails there); realpath below would drop "missing/.." as text.
    typed_folder = os.path.dirname(path)
    if typed_folder and not os.path.isdir(typed_folder):
        raise WriteError(f"{option} {path}: folder {typed_folder} does not exist")
    # realpath follows every link, a dangling one's too: the target is replaced, the link kept.
    target = os.path.realpath(path)
    folder = os.path.dirname(target)
    if not os.path.isdir(folder):
        raise WriteError(f"{option} {path}: folder {folder} does not exist")
    if existing is None:
        return _Output(path, option, target, False, 0o666 & ~_umask(), None, place=target)
    if _write_protected(existing.st_mode, target):
        raise WriteError(f"{option} {path}: is write-protected; not replacing it")
    if _is_mount_point(target):
        # A rename over it fails (EBUSY): said now, not after the whole run.
        raise WriteError(
            f"{option} {path}: is a mount point (a file mounted on its own, as a container's "
            "one-file volume), which cannot be replaced whole; write another file and copy it "
            "over, or let the shell write it (-o - --format FORMAT > PATH)"
        )
    if existing.st_nlink > 1:
        _note_other_names(path, existing.st_nlink - 1)
    identity = (existing.st_dev, existing.st_ino)
    owner = (existing.st_uid, existing.st_gid)
    return _Output(path, option, target, False, _kept_mode(existing), identity, owner, place=target)


def _note_other_names(path: str, others: int) -> None:
    """Say that a file with other hard links is replaced by a new one: the shell's ``>``
    writes in place, which every name sees, where the rename that makes an output atomic
    leaves the other names with the old bytes."""
    from segcli import notices

    names = (
        "another name (a hard link), which keeps"
        if others == 1
        else (f"{others} other names (hard links), which keep")
    )
    notices.send(f"segcli: note: {path} has {names} the old contents: the file is replaced")


def _kept_mode(existing: os.stat_result) -> int:
    """The permission bits a replacement keeps: the file's, less the set-user-id bit (and the
    set-group-id bit of a group-executable file) for a process without root's privilege, as
    the kernel clears them when such a process writes the file through ``>``."""
    mode = stat.S_IMODE(existing.st_mode)
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        mode &= ~stat.S_ISUID
        if mode & stat.S_IXGRP:
            mode &= ~stat.S_ISGID
    return mode


def _direct(path: str, option: str, existing: os.stat_result | None) -> _Output:
    """A FIFO, device or descriptor, written in place."""
    place = _resolve(path)
    output = _Output(path, option, path, True, 0, None, place=place)
    own = _DESCRIPTOR_PATH.match(place)
    if own is not None and own["pid"] is None:
        _refuse_unwritable_descriptor(int(own["fd"]), output)
    if existing is None:
        return output
    if stat.S_ISCHR(existing.st_mode):
        # Not its (device, inode): /dev/stdout and /dev/stderr on one terminal are two streams.
        output.terminal = _opens_a_terminal(path)
        if not _DESCRIPTOR_PATH.match(place):
            output.place = None
    else:  # a FIFO, or the file behind a descriptor (``> out.txt``), however it is named
        output.identity = (existing.st_dev, existing.st_ino)
        by_descriptor = bool(_DESCRIPTOR_PATH.match(place))
        output.pipe_by_descriptor = stat.S_ISFIFO(existing.st_mode) and by_descriptor
        if stat.S_ISFIFO(existing.st_mode) and not by_descriptor:
            _unopened_fifos.add(path)  # a descriptor's pipe closes with the process
    return output


def _refuse_unwritable_descriptor(fd: int, output: _Output) -> None:
    """A WriteError now, before any input is read, for a descriptor of this process that is
    not open (``/dev/fd/9``) or is open for reading only (``/dev/stdin``): writing it would
    fail only once the run is done."""
    import fcntl  # POSIX only, as descriptor paths are

    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    except OSError as exc:
        raise WriteError(f"{_named(output)}: cannot write ({_reason(exc)})") from exc
    if flags & os.O_ACCMODE == os.O_RDONLY:
        raise WriteError(f"{_named(output)}: cannot write (open for reading only)")


def _open_staged(output: _Output, name: str) -> BinaryIO:
    """``name``, the temporary file, opened; or a FIFO, device or descriptor, to be written in
    place.

    A descriptor of this process (``/dev/stderr``, ``/dev/fd/3``) is written through a copy of
    it, as the shell's ``>&2``: the bytes share its file offset, so what the run writes to it
    later (the summary on stderr) comes after them, where a ``2> file`` opened again by name
    had an offset of its own and the summary overwrote the result; and a descriptor open for
    reading only (``/dev/stdin``) cannot be written, where its file opened by name could.
    """
    if not output.direct:
        return open(name, "wb")
    found = _DESCRIPTOR_PATH.match(output.place or "")
    if found is None or found["pid"] is not None:
        # Appending changes nothing for a FIFO or device.
        return open(output.target, "ab")
    fd = int(found["fd"])
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, OSError, ValueError):
            if stream.fileno() == fd:
                stream.flush()  # what Python still holds for it comes first
    return open(os.dup(fd), "wb")  # an open descriptor is never truncated


def _opens_a_terminal(path: str) -> bool:
    """Whether the character device ``path`` is a terminal. Never asked of a FIFO, whose
    open() for writing waits for a reader."""
    try:
        # O_NOCTTY: a terminal opened here must not become the process's controlling one.
        handle = os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError:
        return False  # staging says why it cannot be written
    try:
        return os.isatty(handle)
    finally:
        os.close(handle)


def _keep_owner(temp: str, owner: tuple[int, int] | None) -> None:
    """Give the replacement the replaced file's owner and group, as the shell's ``>`` keeps
    them by writing in place. Only root may give a file away, and a user only to a group of
    theirs: where the process may not, the file stays its own, as a new file would."""
    if owner is None:
        return
    found = os.stat(temp)
    if (found.st_uid, found.st_gid) == owner:
        return
    try:
        os.chown(temp, *owner)
    except PermissionError:
        with contextlib.suppress(PermissionError):  # the group alone, if it is one of ours
            os.chown(temp, -1, owner[1])


def _keep_attributes(temp: str, target: str) -> None:
    """Give the replacement the replaced file's extended attributes, its access control list
    (``system.posix_acl_access``) among them, as the shell's ``>`` keeps them by writing in
    place: a colleague an ACL let write the file may still write it. One the process may not
    set (``security.*`` without privilege) is left out, as a new file would not have it, and
    so are file capabilities, which any write to a file clears."""
    if not hasattr(os, "listxattr"):
        return  # Linux only
    try:
        names = os.listxattr(target)
    except OSError:
        return  # none, or a file system without them
    for name in names:
        if name == "security.capability":
            continue
        with contextlib.suppress(OSError):
            os.setxattr(temp, name, os.getxattr(target, name))


#: ``\040`` and the like: how mountinfo writes a space, tab, line break or backslash in a path.
_MOUNTINFO_ESCAPE = re.compile(r"\\([0-7]{3})")


def _is_mount_point(target: str) -> bool:
    """Whether the file ``target`` is a mount point of its own (``docker run -v f:/data/f``),
    which only writing in place could change. Linux lists them in mountinfo; elsewhere, or
    unreadable, no file is taken for one."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as info:
            lines = info.read().splitlines()
    except OSError:
        return False
    for line in lines:
        fields = line.split(" ")
        if len(fields) > 4:
            point = _MOUNTINFO_ESCAPE.sub(lambda m: chr(int(m[1], 8)), fields[4])
            if point == target:
                return True
    return False


def _write_protected(mode: int, target: str) -> bool:
    # A rename needs only the folder's permission, so the file's own is checked here, as the
    # shell's ``>`` would. root passes os.access whatever the mode, so for root (and everyone)
    # a file with no write bit at all counts as protected too.
    return not os.access(target, os.W_OK) or not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)


def _names_descriptor(path: str) -> bool:
    """Whether ``path`` or a link on its way names an open descriptor (``/dev/stdout``)."""
    return _DESCRIPTOR_PATH.match(_resolve(path)) is not None


def _resolve(path: str) -> str:
    """``path`` with its links followed, up to the first that names an open descriptor of this
    process, given as ``/dev/fd/N`` (what a descriptor points at is not followed: two
    descriptors are two streams, even on one terminal)."""
    current = os.path.abspath(path)
    for _ in range(40):  # the kernel's own limit on links followed
        found = _DESCRIPTOR_PATH.match(current)
        if found:
            # /dev/stdout links to /proc/self/fd/1: one descriptor, one name.
            own = found["pid"] in (None, "self", "thread-self", str(os.getpid()))
            return f"/dev/fd/{found['fd']}" if own else current
        if not os.path.islink(current):
            return os.path.realpath(current)  # a link in a folder's name, too
        current = os.path.join(os.path.dirname(current), os.readlink(current))
        current = os.path.abspath(current)
    return current


def _create_temp(output: _Output, folder: str) -> str:
    try:
        handle, temp = tempfile.mkstemp(dir=folder, prefix=TEMP_PREFIX)
    except OSError as exc:
        raise WriteError(
            f"{_named(output)}: cannot create a file in {folder} ({_reason(exc)})"
        ) from exc
    os.close(handle)
    return temp


def _same_file(one: _Output, other: _Output) -> bool:
    if one.place is not None and one.place == other.place:
        return True
    if one.identity is not None and one.identity == other.identity:
        return not (one.pipe_by_descriptor and other.pipe_by_descriptor)
    return False


def _is_same_path(output: _Output, path: str) -> bool:
    found = _stat(path, quiet=True)
    if found is not None and output.identity == (found.st_dev, found.st_ino):
        return True
    return output.target == os.path.realpath(path)


def _stat(path: str, option: str = "", *, quiet: bool = False) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if quiet:
            return None
        raise WriteError(f"{option} {path}: cannot write ({_reason(exc)})") from exc


def _named(output: _Output) -> str:
    """How a message names an output: its option and path as given (``-o out.npy``)."""
    return f"{output.option} {output.path}"


@functools.cache
def _umask() -> int:
    # The only portable way to read the umask is to set it and put it back.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _reader_left(exc: OSError) -> bool:
    """Whether a write failed because the reader of a pipe or FIFO closed it (``| head``)."""
    return isinstance(exc, BrokenPipeError) or exc.errno == errno.EPIPE


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _free_space(path: str) -> str:
    """What a write that came up short had left, said as the file system tells it: NumPy
    reports a short ``fwrite`` with the byte counts and no errno, where a full disk is the
    usual cause."""
    try:
        info = os.statvfs(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return "is the disk full?"
    free = info.f_bavail * info.f_frsize
    return "no space left on device" if free == 0 else f"{human_bytes(free)} free on its device"
