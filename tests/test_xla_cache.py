"""The suite's XLA compilation cache (`tests/conftest.py`, `share_compiled_programs`).

It is this user's alone (folders created with mode 0700; one owned by another user, a symbolic
link, or open to group or others is refused with a warning), kept per jax/jaxlib version under
``$XDG_CACHE_HOME/mnmt-tests``, brought within a bound and cleared of entries cut
short when a session starts, and CI (`.ci/run`) starts from an empty one. The old
rule (e79f659) kept one folder at ``<tmp>/mnmt-tests-xla-<uid>`` that other users could plant
programs in, unbounded across runs and jax versions, with truncated entries kept forever, and
`.ci/run` reused it: every test here fails on it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import stat
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent


def _load_conftest():
    spec = importlib.util.spec_from_file_location("suite_conftest", TESTS / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # its own call finds this session's cache set and returns
    return module


SUITE = _load_conftest()
VARS = ("JAX_COMPILATION_CACHE_DIR", "JAX_COMPILATION_CACHE_MAX_SIZE",
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES",
        "MNMT_TEST_XLA_CACHE", "XDG_CACHE_HOME")
# a whole zstd frame of b"program " * 40 (python-zstandard, level 3), as jax writes entries
# where zstandard is installed
ZSTD_FRAME = bytes.fromhex("28b52ffd6040007d00004070726f6772616d20010035530b17")
VERSIONS = f"xla-jax-{importlib.metadata.version('jax')}-jaxlib-{importlib.metadata.version('jaxlib')}"


@pytest.fixture
def home(monkeypatch, tmp_path):
    """No cache chosen yet; ``XDG_CACHE_HOME`` and the temporary directory inside the test's tree
    (the old rule's folder lands there too, never in the real one)."""
    for name in VARS:
        monkeypatch.setenv(name, "x")  # recorded, so that what the call sets is undone
        monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    return tmp_path


def cache_of(home: Path) -> Path:
    return home / "xdg" / "mnmt-tests" / VERSIONS


def make_cache(home: Path) -> Path:
    """The default cache's folders, made as a session would (mode 0700)."""
    cache = cache_of(home)
    cache.parent.mkdir(parents=True, mode=0o700)
    cache.mkdir(mode=0o700)
    return cache


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def chosen() -> str | None:
    return os.environ.get("JAX_COMPILATION_CACHE_DIR")


def test_a_new_cache_is_created_private_per_user_and_per_jax_version(home):
    SUITE.share_compiled_programs()
    cache = cache_of(home)
    assert chosen() == str(cache)
    for d in (cache, cache.parent):
        assert mode(d) == 0o700 and os.lstat(d).st_uid == os.getuid()


def test_a_cache_folder_named_by_mnmt_test_xla_cache_is_created_private(home, monkeypatch):
    monkeypatch.setenv("MNMT_TEST_XLA_CACHE", str(home / "mine" / "xla"))
    SUITE.share_compiled_programs()
    assert chosen() == str(home / "mine" / "xla")
    assert mode(home / "mine" / "xla") == 0o700


@pytest.mark.parametrize("which", ["root", "versions", "named"])
def test_a_cache_open_to_group_or_others_is_refused(home, monkeypatch, which):
    cache = make_cache(home)
    if which == "named":
        cache = home / "shared"
        cache.mkdir()
        monkeypatch.setenv("MNMT_TEST_XLA_CACHE", str(cache))
    open_dir = cache.parent if which == "root" else cache
    open_dir.chmod(0o755)
    with pytest.warns(UserWarning, match=f"not using {open_dir} .*mode 0755"):
        SUITE.share_compiled_programs()
    assert chosen() is None
    assert mode(open_dir) == 0o755  # not someone's folder silently changed either


def test_a_cache_owned_by_another_user_is_refused(home, monkeypatch):
    make_cache(home)
    other = os.getuid() + 1
    monkeypatch.setattr(os, "getuid", lambda: other)
    with pytest.warns(UserWarning, match=f"owned by uid {os.lstat(cache_of(home)).st_uid}"):
        SUITE.share_compiled_programs()
    assert chosen() is None


def test_a_symbolic_link_planted_as_the_cache_is_refused(home):
    target = home / "planted"
    target.mkdir(mode=0o700)
    cache_of(home).parent.parent.mkdir(parents=True)
    cache_of(home).parent.symlink_to(target)
    with pytest.warns(UserWarning, match="is a symbolic link"):
        SUITE.share_compiled_programs()
    assert chosen() is None


def test_the_folder_check_names_each_reason(tmp_path):
    uid = os.getuid()
    ok = tmp_path / "ok"
    ok.mkdir(mode=0o700)
    assert SUITE.private_dir_problem(ok, uid) is None
    assert "owned by uid" in SUITE.private_dir_problem(ok, uid + 1)
    ok.chmod(0o750)
    assert "mode 0750" in SUITE.private_dir_problem(ok, uid)
    (tmp_path / "file").write_text("")
    assert "not a directory" in SUITE.private_dir_problem(tmp_path / "file", uid)


def entry(data: bytes = b"program") -> bytes:
    """An entry as jax writes one without zstd: the program, zlib-compressed."""
    return zlib.compress(data)


def test_least_recently_used_entries_beyond_the_bound_are_removed(home, monkeypatch):
    cache = make_cache(home)
    now = time.time()
    for name, days in (("old", 9), ("middle", 5), ("recent", 1)):
        (cache / f"{name}-cache").write_bytes(entry(os.urandom(1000)))  # ~1 kB, incompressible
        os.utime(cache / f"{name}-cache", (now - days * 86400, now - days * 86400))
    os.utime(cache / "old-cache", (now, now - 9 * 86400))  # read today: used most recently
    monkeypatch.setattr(SUITE, "XLA_CACHE_MAX_BYTES", 2200)
    SUITE.share_compiled_programs()
    assert sorted(p.name for p in cache.glob("*-cache")) == ["old-cache", "recent-cache"]
    assert os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"] == "-1"  # no scan of the cache per write


def test_the_bound_holds_a_suite_and_more():
    assert 256 << 20 <= SUITE.XLA_CACHE_MAX_BYTES <= 4 << 30


def test_entries_cut_short_are_removed_when_a_session_starts(home):
    cache = make_cache(home)
    whole = entry(os.urandom(300))
    files = {"whole-cache": whole, "empty-cache": b"", "cut-cache": whole[:-5],
             "zstd-cache": ZSTD_FRAME, "zstd_cut-cache": ZSTD_FRAME[:-3]}
    for name, data in files.items():
        (cache / name).write_bytes(data)
    SUITE.share_compiled_programs()
    assert sorted(p.name for p in cache.glob("*-cache")) == ["whole-cache", "zstd-cache"]


CHILD = """
import jax, jax.numpy as jnp
for n in range(2, 5):
    jax.jit(lambda x: jnp.tanh(x @ x.T).sum(0))(jnp.ones((n, 3))).block_until_ready()
"""


def test_what_jax_writes_is_kept_and_a_cut_copy_removed_by_the_next_session(home, monkeypatch):
    """A child process inherits the cache and writes real entries; the next session's check
    keeps them all and removes a copy of one cut short."""
    monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    SUITE.share_compiled_programs()
    subprocess.run([sys.executable, "-c", CHILD], check=True, timeout=300)
    cache = cache_of(home)
    written = sorted(p.name for p in cache.glob("*-cache"))
    assert written, "nothing cached"
    (cache / "cut-cache").write_bytes((cache / written[0]).read_bytes()[:-10])
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR")  # a new session
    SUITE.share_compiled_programs()
    assert sorted(p.name for p in cache.glob("*-cache")) == written


def test_caches_of_other_jax_versions_unused_for_a_month_are_removed(home):
    root = cache_of(home).parent
    root.mkdir(parents=True, mode=0o700)
    for name, days in (("xla-jax-0.0.1-jaxlib-0.0.1", 40), ("xla-jax-0.0.2-jaxlib-0.0.2", 10)):
        (root / name).mkdir(mode=0o700)
        (root / name / "p-cache").write_bytes(b"x")
        then = time.time() - days * 86400
        os.utime(root / name, (then, then))
    SUITE.share_compiled_programs()
    assert sorted(p.name for p in root.iterdir()) == ["xla-jax-0.0.2-jaxlib-0.0.2", VERSIONS]


# --- CI starts cold ---------------------------------------------------------------------------

PROBE = ('source .ci/xla_cache.sh || exit 9; echo "$MNMT_TEST_XLA_CACHE"; '
         'echo "${JAX_COMPILATION_CACHE_DIR-unset}"; stat -c %a "$MNMT_TEST_XLA_CACHE"; '
         'ls -A "$MNMT_TEST_XLA_CACHE" | wc -l')


def ci_probe(tmp_path, **env) -> list[str]:
    full = {k: v for k, v in os.environ.items() if k != "MNMT_CI_REUSE_XLA_CACHE"}
    full.update(TMPDIR=str(tmp_path), **env)
    done = subprocess.run(["bash", "-c", PROBE], cwd=REPO, env=full, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split("\n")


def test_ci_gives_the_suite_a_fresh_private_cache_and_removes_it(tmp_path):
    warm = tmp_path / "warm"
    warm.mkdir(mode=0o700)
    (warm / "p-cache").write_bytes(b"x")
    runs = [ci_probe(tmp_path, MNMT_TEST_XLA_CACHE=str(warm), JAX_COMPILATION_CACHE_DIR=str(warm))
            for _ in range(2)]
    (first, unset, perms, count, _), (second, *_) = runs
    assert first != second and str(warm) not in (first, second)
    assert (unset, perms, count) == ("unset", "700", "0")
    assert not Path(first).exists() and not Path(second).exists()  # removed when CI ends


def test_ci_reuses_a_cache_only_when_told(tmp_path):
    warm = tmp_path / "warm"
    warm.mkdir(mode=0o700)
    out = ci_probe(tmp_path, MNMT_CI_REUSE_XLA_CACHE="1", MNMT_TEST_XLA_CACHE=str(warm))
    assert out[0] == str(warm) and out[3] == "0"
    assert warm.exists()


def test_ci_run_sets_the_cache_up_before_the_tests():
    text = (REPO / ".ci" / "run").read_text()
    assert "source .ci/xla_cache.sh" in text
    assert text.index("source .ci/xla_cache.sh") < text.index("-m pytest")
