# Sourced by .ci/run: the test suite's XLA compilation cache for this CI run. CI starts cold: a
# fresh private folder (mktemp -d: a random name, mode 0700) that the suite fills and that is
# removed when the run ends, whatever JAX_COMPILATION_CACHE_DIR or MNMT_TEST_XLA_CACHE said.
# MNMT_CI_REUSE_XLA_CACHE=1 keeps them instead: the suite's per-user cache (tests/conftest.py).
if [ "${MNMT_CI_REUSE_XLA_CACHE:-0}" = 1 ]; then
  echo "XLA cache: reusing ${JAX_COMPILATION_CACHE_DIR:-${MNMT_TEST_XLA_CACHE:-the per-user cache}}" >&2
else
  unset JAX_COMPILATION_CACHE_DIR
  MNMT_TEST_XLA_CACHE="$(mktemp -d "${TMPDIR:-/tmp}/mnmt-ci-xla.XXXXXXXXXX")"
  export MNMT_TEST_XLA_CACHE
  trap 'rm -rf "$MNMT_TEST_XLA_CACHE"' EXIT
fi
