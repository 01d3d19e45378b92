"""Shared SentencePiece vocabulary: ids, language tokens as single pieces, CLI."""

import json
import os

import pytest

from mnmt.data.vocab import lang_piece, lang_token, language_token_id, main, train_vocabulary


def test_ids_and_language_tokens(tiny_vocab):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=tiny_vocab)
    assert (sp.pad_id(), sp.eos_id(), sp.unk_id(), sp.bos_id()) == (0, 1, 2, -1)
    for code in ("de", "zh", "en"):
        pieces = sp.encode(f"{lang_token(code)} sus kalkak", out_type=str)
        assert pieces[0] == lang_piece(code)  # one piece, no separate "▁" before it
        ids = sp.encode(f"{lang_token(code)} sus kalkak")
        assert ids == [language_token_id(sp, code)] + sp.encode("sus kalkak")
    meta = json.load(open(os.path.join(os.path.dirname(tiny_vocab), "spm.json")))
    assert meta["languages"] == ["de", "en", "zh"]


def test_bare_user_symbol_would_waste_a_piece(tmp_path):
    """Why we register '▁<2xx>': a bare '<2xx>' symbol costs an extra '▁' piece."""
    import io

    import sentencepiece as spm

    texts = ["sus kalkak roe", "dir pus ses"] * 200
    m = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=m, vocab_size=30,
                                   user_defined_symbols=["<2de>"], hard_vocab_limit=False,
                                   minloglevel=2)
    sp = spm.SentencePieceProcessor(model_proto=m.getvalue())
    assert sp.encode("<2de> sus", out_type=str)[:2] == ["\u2581", "<2de>"]


def test_bad_inputs(tmp_path):
    with pytest.raises(ValueError, match="language code"):
        lang_token("DE!")
    with pytest.raises(ValueError, match="got no texts"):
        train_vocabulary([], str(tmp_path), 100)
    with pytest.raises(ValueError, match="no texts for"):
        train_vocabulary({"a": ["x y"], "b": []}, str(tmp_path), 100)
    with pytest.raises(ValueError, match="vocab_size"):
        train_vocabulary(["x"], str(tmp_path), 3)


def test_balanced_mapping_and_missing_language_piece(tmp_path):
    import sentencepiece as spm

    texts = {"big": [("alpha beta", "gamma delta")] * 500, "small": [("epsilon", "zeta")] * 5}
    path = train_vocabulary(texts, str(tmp_path), 40, languages=["fr"])
    sp = spm.SentencePieceProcessor(model_file=path)
    assert json.load(open(tmp_path / "spm.json"))["num_texts"] == 20  # 5 pairs per key, 2 sides
    language_token_id(sp, "fr")
    with pytest.raises(ValueError, match="no single piece"):
        language_token_id(sp, "de")


def test_cli_trains_preset_vocabulary(tmp_path, capsys):
    assert main(["--preset", "cpu-tiny", "--out_dir", str(tmp_path), "--vocab_size", "400",
                 "--n_per_pair", "300"]) == 0
    out = capsys.readouterr().out.strip()
    assert out == str(tmp_path / "spm.model") and os.path.exists(out)


def test_too_small_vocab_for_the_script_is_a_clear_error(tmp_path):
    texts = ["".join(chr(0x4E00 + 7 * i + j) for j in range(5)) for i in range(40)]
    with pytest.raises(ValueError, match="smaller than the number of distinct characters"):
        train_vocabulary(texts, str(tmp_path), 50)


def test_retrained_model_at_same_path_is_reloaded(tmp_path):
    from mnmt.data.vocab import get_vocabulary

    a = train_vocabulary(["alpha beta gamma"] * 50, str(tmp_path), 30, languages=["de"])
    v1 = get_vocabulary(a)
    assert get_vocabulary(a) is v1  # cached
    before = v1.tokenizer.encode("delta", out_type=str)
    import time

    time.sleep(0.01)
    train_vocabulary(["delta epsilon zeta eta"] * 50, str(tmp_path), 34, languages=["de"])
    v2 = get_vocabulary(a)
    assert v2 is not v1
    assert v2.tokenizer.encode("delta", out_type=str) != before


def test_cli_trains_on_text_files(tmp_path, capsys):
    import sentencepiece as spm

    a = tmp_path / "a.tsv"
    a.write_text("hello world\thallo welt\n" * 30, encoding="utf-8")
    b = tmp_path / "b.txt"
    b.write_text("bonjour le monde\n" * 30, encoding="utf-8")
    assert main(["--text_files", str(a), str(b), "--out_dir", str(tmp_path / "v"),
                 "--vocab_size", "40", "--languages", "de,fr"]) == 0
    sp = spm.SentencePieceProcessor(model_file=capsys.readouterr().out.strip())
    assert language_token_id(sp, "fr") > 2 and language_token_id(sp, "de") > 2
    for text in ("hallo welt", "bonjour le monde"):  # both files (both TSV sides) were used
        assert sp.unk_id() not in sp.encode(text)
