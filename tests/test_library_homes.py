"""The libraries' per-user files of a test run stay in the session's private folder
(tests/conftest.py: library_files_in_a_session_dir). Before (e79f659) matplotlib, Keras, IPython
and Jupyter wrote into the user's home folder (~/.cache/matplotlib, ~/.keras, ~/.ipython)."""

import os
import stat
import subprocess
import sys
from pathlib import Path

# the contract, written out: `from conftest import …` may find another folder's conftest
LIBRARY_VARIABLES = ("MPLCONFIGDIR", "KERAS_HOME", "IPYTHONDIR", "JUPYTER_RUNTIME_DIR")


def test_library_variables_point_into_one_private_session_folder():
    home = Path(os.environ["MNMT_TEST_LIBRARY_HOME"])
    st = home.stat()
    assert st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o700
    for variable in LIBRARY_VARIABLES:
        assert Path(os.environ[variable]).parent == home, variable


def test_matplotlib_and_ipython_write_there_not_in_home(tmp_path):
    # a child with a fresh HOME: anything written outside the session folder lands in it
    fake_home = tmp_path / "home"
    fake_home.mkdir()
    code = ("import matplotlib, matplotlib.font_manager, IPython.paths as p; "
            "print(matplotlib.get_configdir()); print(p.get_ipython_dir())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=dict(os.environ, HOME=str(fake_home)))
    configdir, ipythondir = out.stdout.split()
    home = os.environ["MNMT_TEST_LIBRARY_HOME"]
    assert configdir.startswith(home) and ipythondir.startswith(home)
    assert list(fake_home.iterdir()) == []
