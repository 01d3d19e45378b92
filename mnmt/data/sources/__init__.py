"""Where parallel text comes from, each registered as SeqIO tasks by :mod:`mnmt.data.tasks`.

- ``bitext``: bring-your-own corpora (TSV or aligned plain-text files, gzip allowed);
- ``tfds``: TFDS translation datasets (e.g. ``wmt19_translate``);
- ``wmt19``: the WMT19 En→De / En→Zh tasks of the paper-scale study file;
- ``gettext``: human-translated ``.mo`` catalogs found offline under /usr/share/locale.

The synthetic family lives in :mod:`mnmt.data.synthetic`.
"""
