"""Random or binary bytes named ``.txt`` are refused (torch_gpubpe.io.formats.looks_binary),
and no real text is: every shipped corpus, CJK, Arabic, emoji, code, ANSI logs, man-page
overstrike, text in 8-bit legacy encodings. ``format="binary"`` reads the same bytes unchecked.

| case | expected | test |
|---|---|---|
| each corpus of the extended set as one ``.txt`` file (and its first 64 KiB alone) | read back byte for byte | test_real_corpora_are_text |
| scripts, code, logs, overstrike, Latin-1/CP1251/Shift-JIS, BOM, tiny and empty files | read back | test_other_real_text_is_text |
| random printable-or-not text without control characters (hypothesis) | never refused | test_random_text_is_text |
| random bytes, UTF-16 text, NUL padding, compressed random bytes, via the CLI source | NotTextError naming file, shares, ``--format binary`` | test_binary_is_refused |
| ``format="binary"`` / ``file_format="binary"`` | the same bytes, split as text | test_binary_format_reads_the_bytes |
"""

from __future__ import annotations

import gzip
import json
import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CORPORA, CORPUS_NAMES
from torch_gpubpe.errors import InputError, NotTextError
from torch_gpubpe.io.readers import (FORMATS, MAX_CONTROL_SHARE, MAX_NUL_SHARE, MIN_SUSPECT_BYTES,
                                  TEXT_CHECK_BYTES, FileReader, TextSource, looks_binary)


def read_bytes(path, **kw) -> bytes:
    """The file as the reader gives it (sample_by="line": the lines joined give the file)."""
    return b"".join(bytes(v) for b in FileReader(path, **kw).batches()
                    for v in b.values.to_pylist())


def corpus_bytes(name: str) -> bytes:
    with gzip.open(CORPORA / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
        return b"".join(json.loads(line)["text"].encode("utf-8", "surrogatepass") + b"\n"
                        for line in f)


@pytest.mark.parametrize("name", CORPUS_NAMES)
def test_real_corpora_are_text(tmp_path, name):
    data = corpus_bytes(name)
    for k, part in enumerate((data, data[:TEXT_CHECK_BYTES])):
        p = tmp_path / f"{name}{k}.txt"
        p.write_bytes(part)
        assert read_bytes(p) == part
    # every 64 KiB window of the corpus passes, not only the first one
    for a in range(0, len(data), TEXT_CHECK_BYTES // 2):
        assert looks_binary(data[a:a + TEXT_CHECK_BYTES]) is None, (name, a)


OTHER_TEXT = {
    "cjk": "中文字符测试，日本語のテキスト、한국어 텍스트입니다。\n" * 300,
    "arabic": "الكتاب على الطاولة، وهذه جملة عربية للاختبار.\n" * 300,
    "hebrew_devanagari_thai": "שלום עולם क्षत्रिय भाषा ภาษาไทย ๑๒๓\n" * 300,
    "emoji": "😀🙂👍🏽 👨‍👩‍👧‍👦 🇹🇷 ❤️\n" * 400,
    "code": "def f(x):\n\treturn {'a': [1, 2, 3]}[x]  # ok\r\n" * 400,
    "ansi_log": "\x1b[31mERROR\x1b[0m 2026-12-01 something failed\n" * 400,
    "formfeed_vt": "page one\x0c page two\x0b\n" * 400,
}
LEGACY = {  # 8-bit encodings: invalid UTF-8, but text (a byte-level BPE takes them as they are)
    "latin1_tr": ("Türkçe ığüşöç İstanbul'da çok güzel bir şehir.\n" * 300, "iso-8859-9"),
    "cp1251": ("Привет, мир! Это русский текст для проверки.\n" * 300, "cp1251"),
    "shift_jis": ("日本語のテキストです。これはテストです。\n" * 300, "shift_jis"),
}


def test_other_real_text_is_text(tmp_path):
    cases = {k: v.encode() for k, v in OTHER_TEXT.items()}
    cases.update({k: t.encode(enc) for k, (t, enc) in LEGACY.items()})
    cases["bom"] = "\ufeffwith a byte order mark\n".encode() * 100
    cases["overstrike_man"] = b"N\x08NA\x08AM\x08ME\x08E\n     ls - list\n" * 300
    cases["empty"] = b""
    cases["tiny"] = b"x"
    cases["one_stray_nul"] = b"a line of text\n" * 5000 + b"\x00" + b"more text\n" * 100
    cases["short_with_odd_bytes"] = b"abc\xff\xfe def\r\n\x00\x01\n\xef\xbb\xbfBOM\r\n\n"  # < 8
    for name, data in cases.items():
        p = tmp_path / f"{name}.txt"
        p.write_bytes(data)
        assert read_bytes(p) == data, name
    assert looks_binary(cases["cp1251"]) is None and looks_binary(cases["cjk"]) is None


TEXT_CHARS = st.characters(blacklist_categories=("Cc", "Cs")) | st.sampled_from("\n\t\r ")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(TEXT_CHARS, max_size=3000))
def test_random_text_is_text(text):
    assert looks_binary(text.encode()) is None


def test_binary_is_refused(tmp_path):
    rng = random.Random(17)
    cases = {
        "random.txt": bytes(rng.getrandbits(8) for _ in range(100_000)),
        "short_random.txt": bytes(rng.getrandbits(8) for _ in range(300)),
        "utf16.txt": ("UTF-16 text is not UTF-8: every other byte is NUL.\n" * 50
                      ).encode("utf-16-le"),
        "nul_padded.txt": b"header\n" + bytes(4096),
        # random bytes compressed: the check reads the decompressed bytes
        "random.txt.gz": gzip.compress(os.urandom(70_000)),
    }
    for name, data in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(NotTextError, match=rf"{name}: read as text but it looks like "
                           r"binary data \(.*NUL bytes.*control bytes.*not valid UTF-8 in its "
                           r"first [\d,]+ bytes\).*--format binary") as e:
            read_bytes(p)
        assert isinstance(e.value, InputError)
    # the CLI's source (TextSource of --data-files) raises it too
    with pytest.raises(NotTextError):
        list(TextSource(data_files=str(tmp_path / "random.txt")).reader().batches())
    # the thresholds: just under each passes, at each it is refused
    n = 100_000
    assert looks_binary(b"a" * (n - 99) + b"\x00" * 99) is None
    assert looks_binary(b"a" * (n - 100) + b"\x00" * int(n * MAX_NUL_SHARE)) is not None
    assert looks_binary(b"a" * (n - 999) + b"\x01" * 999) is None
    assert looks_binary(b"a" * (n - 1000) + b"\x01" * int(n * MAX_CONTROL_SHARE)) is not None
    # a short file: the share alone is not enough, MIN_SUSPECT_BYTES of them are needed
    short = b"x" * 100
    k = MIN_SUSPECT_BYTES
    assert looks_binary(short + b"\x00" * (k - 1)) is None
    assert looks_binary(short + b"\x00" * k) is not None
    assert looks_binary(short + b"\x02" * (k - 1)) is None
    assert looks_binary(short + b"\x02" * k) is not None
    # only the first block is looked at: binary after 64 KiB of text is read (documented)
    p = tmp_path / "late.txt"
    p.write_bytes(b"text line\n" * (TEXT_CHECK_BYTES // 10 + 1) + os.urandom(5000))
    assert read_bytes(p) == p.read_bytes()


def test_binary_format_reads_the_bytes(tmp_path):
    assert "binary" in FORMATS
    data = os.urandom(50_000) + b"\n\x00end"
    p = tmp_path / "random.txt"
    p.write_bytes(data)
    assert read_bytes(p, format="binary") == data
    docs = [bytes(v) for b in FileReader(p, format="binary", sample_by="document").batches()
            for v in b.values.to_pylist()]
    assert docs == [data]
    got = b"".join(bytes(v) for b in TextSource(data_files=str(p), file_format="binary")
                   .reader().batches() for v in b.values.to_pylist())
    assert got == data


def test_docstring_examples():
    import doctest

    from torch_gpubpe.io import formats, readers

    for mod in (readers, formats):  # the reader layer's example; looks_binary's
        res = doctest.testmod(mod)
        assert res.attempted >= 2 and res.failed == 0
