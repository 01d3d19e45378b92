"""Fixtures shared by every test folder."""

import atexit
import errno
import importlib.metadata
import importlib.util
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import warnings
import zlib
from collections.abc import Mapping
from pathlib import Path

import gin
import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


# The suite's compiled programs live in a private per-user cache (`share_compiled_programs`),
# bounded when a session starts: least recently used programs go first. jax's own bound
# (JAX_COMPILATION_CACHE_MAX_SIZE) is left off: it takes a lock and reads a stamp file of every
# entry on each write, seconds per test file once the suite's programs are cached.
XLA_CACHE_MAX_BYTES = 1 << 30
XLA_CACHE_STALE_DAYS = 30
ENTRY_SUFFIX = "-cache"
CHECKED_MARK = ".checked"  # its time: when the last session started checking entries
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def private_dir_problem(path: Path, uid: int) -> str | None:
    """Why ``path`` may not hold compiled programs that tests will run, or None when it is a
    directory (not a symbolic link) owned by ``uid`` that no group or other user can read, write
    or enter: a program another user planted there would run as this user's test."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if st.st_uid != uid:
        return f"{path} is owned by uid {st.st_uid}, not by this user (uid {uid})"
    if st.st_mode & 0o077:
        return (f"{path} has mode {stat.S_IMODE(st.st_mode):04o}: group or others have access "
                "(expected 0700)")
    return None


def make_private_dir(path: Path, uid: int) -> str | None:
    """Create ``path`` with mode 0700 (whatever the umask) unless it exists; then, as
    :func:`private_dir_problem`, why it may not be used, or None."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    else:
        os.chmod(path, 0o700)
    return private_dir_problem(path, uid)


def jax_versions() -> str:
    """``jax-0.4.30-jaxlib-0.4.30``: the versions that key the cache's folder (read from the
    installed packages' metadata, without importing jax)."""
    parts = []
    for name in ("jax", "jaxlib"):
        try:
            parts.append(f"{name}-{importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            parts.append(f"{name}-none")
    return "-".join(parts)


def default_xla_cache(environ: Mapping[str, str]) -> Path:
    """``$XDG_CACHE_HOME/mnmt-tests/xla-<jax and jaxlib versions>`` (``~/.cache`` where
    ``XDG_CACHE_HOME`` is unset or not absolute, as the XDG base directory rules say)."""
    xdg = environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "mnmt-tests" / f"xla-{jax_versions()}"


def whole_entry(data: bytes) -> bool:
    """Whether ``data`` is one whole compressed stream as jax writes its entries (zstd, or zlib
    where no zstd module is installed): False for a file cut short by a killed process."""
    if data.startswith(ZSTD_MAGIC):
        try:
            from compression import zstd  # Python 3.14
            decompressor, error = zstd.ZstdDecompressor(), zstd.ZstdError
        except ImportError:
            try:
                import zstandard
            except ImportError:
                return True  # nothing here reads it: jax cannot either, nor would it write one
            decompressor, error = zstandard.ZstdDecompressor().decompressobj(), zstandard.ZstdError
    else:
        decompressor, error = zlib.decompressobj(), zlib.error
    try:
        decompressor.decompress(data)
    except error:
        return False
    return decompressor.eof


def prune_xla_cache(cache: Path, max_bytes: int) -> list[str]:
    """Remove the entries written since the last check (:data:`CHECKED_MARK`) that a killed
    process cut short (jax writes an entry in place and never writes an existing one again), then
    the least recently used entries (file access or modification time) beyond ``max_bytes``.
    Returns the removed names. Another session may be writing: a file it has not finished is
    taken for a cut one, which costs that program one more compilation, nothing else."""
    mark = cache / CHECKED_MARK
    since = mark.stat().st_mtime - 1 if mark.exists() else -1.0
    started = time.time()
    removed, kept = [], []
    for entry in cache.glob(f"*{ENTRY_SUFFIX}"):
        try:
            st = entry.stat()
            if st.st_mtime >= since and not whole_entry(entry.read_bytes()):
                entry.unlink()
                removed.append(entry.name)
            else:
                kept.append((max(st.st_atime, st.st_mtime), st.st_size, entry))
        except FileNotFoundError:  # removed by another session meanwhile
            continue
    mark.touch()
    os.utime(mark, (started, started))
    total = sum(size for _, size, _ in kept)
    for _, size, entry in sorted(kept, key=lambda k: k[0]):
        if total <= max_bytes:
            break
        entry.unlink(missing_ok=True)
        removed.append(entry.name)
        total -= size
    return removed


def remove_stale_versions(root: Path, keep: Path, days: float = XLA_CACHE_STALE_DAYS) -> list[str]:
    """Remove the caches of other jax versions under ``root`` that no session has opened for
    ``days`` (each session touches its own folder when it starts). Returns their names."""
    old = time.time() - days * 86400
    stale = [d for d in root.glob("xla-*")
             if d != keep and d.is_dir() and not d.is_symlink() and d.stat().st_mtime < old]
    for d in stale:
        shutil.rmtree(d)
    return [d.name for d in stale]


def share_compiled_programs() -> None:
    """Persist XLA executables for the whole suite, both xdist workers and every child process
    (studies, `mnmt-train`, multi-host runs inherit the environment): most tests compile the same
    tiny models, and each program is then compiled once per machine instead of once per test.
    The cache key is the program, its compile options and the jax/jaxlib versions, so a test
    sees the executable it would have compiled.

    The cache is this user's alone: :func:`default_xla_cache` (a folder per jax/jaxlib version;
    folders of other versions unused for ``XLA_CACHE_STALE_DAYS`` are removed), or
    ``MNMT_TEST_XLA_CACHE=DIR``. Each folder is created with mode 0700; one owned by another
    user, a symbolic link, or open to group or others is not used (a warning says why), since
    the programs in it run as this user. When the session starts, entries cut short are removed
    and the cache is brought within ``XLA_CACHE_MAX_BYTES`` (:func:`prune_xla_cache`).
    ``MNMT_TEST_XLA_CACHE=off`` turns the cache off; any ``JAX_COMPILATION_CACHE_DIR`` already
    set is kept as it is (xdist workers inherit the one their controller chose)."""
    where = os.environ.get("MNMT_TEST_XLA_CACHE", "")
    if where == "off" or "JAX_COMPILATION_CACHE_DIR" in os.environ:
        return
    if where:
        dirs = [Path(where).absolute()]
    else:
        cache = default_xla_cache(os.environ)
        dirs = [cache.parent, cache]
    dirs[0].parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    for d in dirs:
        problem = make_private_dir(d, os.getuid())
        if problem:
            warnings.warn(f"tests/conftest.py: not using {d} as the suite's XLA cache: "
                          f"{problem}. Compiling without a persistent cache; remove it or set "
                          "MNMT_TEST_XLA_CACHE to a folder of your own (mode 0700)",
                          stacklevel=2)
            return
    cache = dirs[-1]
    os.utime(cache)
    if not where:
        remove_stale_versions(cache.parent, cache)
    prune_xla_cache(cache, XLA_CACHE_MAX_BYTES)
    os.environ["JAX_COMPILATION_CACHE_DIR"] = str(cache)
    os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"] = "-1"  # bounded above, once per session
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")


# XLA:CPU's default backend optimisation level (3) costs more compile time than the tests' tiny
# programs run for: most of a cold suite is compilation. Level 1 compiles a training step in
# about 60 % of the time and runs it about as fast; level 0 compiles a little faster still but
# runs tiny models 1.8-2.8x slower, which cost more than it saved once programs are cached
# (benchmarks/RESULTS.md: the test suite's XLA optimisation level).
FAST_COMPILE_FLAGS = ("--xla_backend_optimization_level=1",)


def compile_fast() -> None:
    """Compile the suite's programs at XLA:CPU's backend optimisation level 1 (both xdist workers
    and every child process that inherits XLA_FLAGS): the same programs, computed to float
    tolerance, compiled faster and run about as fast, which tiny test models gain from. Tests
    that set XLA_FLAGS for a child process of their own keep their flags. ``MNMT_TEST_XLA_OPT=
    full`` keeps XLA's default optimisations (e.g. to time something in a test)."""
    if os.environ.get("MNMT_TEST_XLA_OPT", "") == "full":
        return
    flags = os.environ.get("XLA_FLAGS", "").split()
    names = {f.split("=")[0] for f in flags}
    flags += [f for f in FAST_COMPILE_FLAGS if f.split("=")[0] not in names]
    os.environ["XLA_FLAGS"] = " ".join(flags)


#: where libraries keep per-user files that a test run would otherwise leave in the home folder
LIBRARY_HOMES = {"MPLCONFIGDIR": "matplotlib", "KERAS_HOME": "keras", "IPYTHONDIR": "ipython",
                 "JUPYTER_RUNTIME_DIR": "jupyter-runtime"}


def library_files_in_a_session_dir() -> None:
    """matplotlib's font cache, Keras's config (written when TensorFlow is imported), IPython's
    profile and history and Jupyter's kernel connection files (the notebook test) go into one
    private folder of the session (``tempfile.mkdtemp``: a random name, mode 0700), removed
    when the process that made it exits, instead of the user's home folder. xdist workers and
    child processes inherit the variables; a variable already set is kept."""
    if "MNMT_TEST_LIBRARY_HOME" in os.environ:
        return
    home = tempfile.mkdtemp(prefix="mnmt-tests-libraries-")
    os.environ["MNMT_TEST_LIBRARY_HOME"] = home
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    for variable, folder in LIBRARY_HOMES.items():
        os.environ.setdefault(variable, os.path.join(home, folder))


share_compiled_programs()
compile_fast()
library_files_in_a_session_dir()


@pytest.fixture(autouse=True)
def no_gin_bindings_left_behind():
    """Every test ends with gin's global config cleared: a test that parses gin (`mnmt-train`'s
    main does) would otherwise leave bindings that a later test's gin-configurable
    `TrainConfig(...)` silently picks up (a run id, an optimizer)."""
    yield
    gin.clear_config()


@pytest.fixture(scope="session", autouse=True)
def hypothesis_files_in_the_session_tree(tmp_path_factory):
    """Hypothesis keeps what it caches (constants found in the code under test, its unicode
    tables) in ``.hypothesis/`` under the working directory, by default the repository's root:
    here in the session's temporary tree instead, unless ``HYPOTHESIS_STORAGE_DIRECTORY`` says
    where (the properties run with ``database=None``: no failing examples are kept either)."""
    if importlib.util.find_spec("hypothesis") and not os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY"):
        from hypothesis.configuration import set_hypothesis_home_dir

        set_hypothesis_home_dir(tmp_path_factory.mktemp("hypothesis"))


@pytest.fixture(scope="session")
def benchmark_script():
    """`benchmark_script("train_step")`: a script of benchmarks/ (found in whichever room holds
    it: speed/, validation/, studies/) imported as a module (they are scripts run by path);
    each is loaded once per session."""
    loaded = {}

    def load(name: str):
        if name not in loaded:
            (path,) = BENCHMARKS.glob(f"*/{name}.py")
            spec = importlib.util.spec_from_file_location(f"benchmark_{name}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            loaded[name] = module
        return loaded[name]

    return load


def run_ci_study(out: Path, timeout: int) -> subprocess.CompletedProcess:
    """`mnmt-study run --preset ci --out OUT` in a child process (≈ 2 minutes on 2 cores)."""
    # a relative --out, run from its parent, as the README's default `mnmt_study_out` is
    cmd = [sys.executable, "-m", "mnmt.study.cli", "run", "--preset", "ci", "--out", out.name]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=out.parent)


@pytest.fixture(scope="session")
def ci_study(tmp_path_factory):
    """`(out, process)` of the `ci` preset's study, run once per session: tests/test_main_job.py
    and tests/test_report_figures.py read its run directories and report.

    With ``MNMT_CI_STUDY=DIR`` the study runs in DIR instead of a fresh directory: a study
    finished there earlier is only exported and reported again (seconds, not minutes).
    """
    reuse = os.environ.get("MNMT_CI_STUDY")
    out = Path(reuse).resolve() if reuse else tmp_path_factory.mktemp("ci_study")
    proc = run_ci_study(out, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out, proc


@pytest.fixture(scope="session")
def ci_study_runner():
    """:func:`run_ci_study`, to run the study again in the same directory."""
    return run_ci_study


class SmallDisk:
    """A tmpfs mounted for one test (`small_disk`), which `fill()` makes full and `free()` frees."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.filler = path / ".filler"

    def fill(self) -> None:
        """Take every free byte with a filler file (files keep the slack of their last page)."""
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        chunk = 1 << 20
        try:
            while chunk:
                try:
                    os.write(fd, bytes(chunk))
                except OSError as err:
                    if err.errno != errno.ENOSPC:
                        raise
                    chunk //= 2
        finally:
            os.close(fd)

    def free(self) -> None:
        """Remove the filler file."""
        self.filler.unlink(missing_ok=True)


@pytest.fixture
def small_disk(tmp_path):
    """A 64 MiB tmpfs mounted at `tmp_path/disk` for the test (unmounted after it): a real file
    system that runs out of space. Skipped, saying why, where the test process cannot mount one
    (not root, or no CAP_SYS_ADMIN in a container)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs for the full-disk tests needs root")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount_point)],
                          capture_output=True, text=True)
    if proc.returncode:
        pytest.skip(f"cannot mount a tmpfs for the full-disk tests: {proc.stderr.strip()}")
    try:
        yield SmallDisk(mount_point)
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


# --- running the suite over several processes (pytest-xdist: `pytest -n 2`) ---------------------
# Tests are sent to the workers a file at a time (module fixtures build once), except the files
# that read the `ci` study of `ci_study`: they form one unit, so the study (minutes) runs once, on
# one worker. xdist queues the units by their number of tests, most first (its loadscope
# reordering); queueing the study's unit first instead changes no wall time (simulated from
# `--durations` of a whole run: the last units decide it, not the first).
CI_STUDY_FILES = ("tests/test_main_job.py", "tests/test_report_figures.py",
                  "tests/test_notebook.py")


if importlib.util.find_spec("xdist") is not None:
    def pytest_xdist_make_scheduler(config, log):
        """xdist's file-at-a-time scheduling, with the `ci` study's readers as one unit."""
        from xdist.scheduler import LoadScopeScheduling

        class FileScheduling(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                path = nodeid.split("::", 1)[0]
                return "ci_study" if path in CI_STUDY_FILES else path

        return FileScheduling(config, log)
