"""No test writes outside its temporary tree: hypothesis's files (tests/conftest.py,
`hypothesis_files_in_the_session_tree`). Under the old rule (e79f659) they went to
``.hypothesis/`` in the working directory, the repository's root."""

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.configuration import storage_directory


def test_hypothesis_keeps_its_files_in_the_session_tree(tmp_path_factory):
    @settings(max_examples=5, database=None, derandomize=True)
    @given(st.text(max_size=3))
    def prop(text: str) -> None:
        assert isinstance(text, str)

    prop()
    home = storage_directory("constants", intent_to_write=False).home_directory.resolve()
    assert home.is_relative_to(tmp_path_factory.getbasetemp().resolve())
