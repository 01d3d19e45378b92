"""Importing this module registers the mixtures bound in the parsed gin config.

Name it in ``setup_tasks.modules`` (T5X's ``MIXTURE_OR_TASK_MODULE``); see
:mod:`mnmt.data.gin_mixtures`. A second import in the same process is a no-op: call
``mnmt.data.gin_mixtures.register_configured_mixtures()`` after re-parsing gin instead.
"""

from mnmt.data.gin_mixtures import register_configured_mixtures

REGISTERED = register_configured_mixtures()
