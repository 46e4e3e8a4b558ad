"""The API users of tiktoken, Hugging Face and torch expect.

Each test checks one promise against an oracle: ``reference.encode`` for ids, tiktoken itself
for the special-token semantics it names, ``transformers`` for the exported files.
"""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch

from conftest import CORPUS_NAMES, corpus_docs, subprocess_env
from torch_gpubpe.core import reference
from torch_gpubpe.encoding.tokenizer import BatchEncoding, Tokenizer
from torch_gpubpe.errors import InputError
from torch_gpubpe.core.export import export_all, tiktoken_encoding
from torch_gpubpe.core.vocab import Vocab

EOT, PAD = "<|endoftext|>", "<|pad|>"
SPECIAL_TEXTS = [
    f"a{EOT}b", f"{EOT}", f"{EOT}{EOT}", f" x {PAD}{EOT} y", "no special", "",
    f"<|endoftext|><|pad|>tail {EOT}\n", f"<|endoftext <|pad| {EOT[:-1]}", f"yakınlık{EOT}ve",
]


@pytest.fixture(scope="module")
def merges():
    docs = [d for name in CORPUS_NAMES for d in corpus_docs(name, 3_000)]
    return reference.train(docs + [f"x{EOT}y {PAD}"] * 5, vocab_size=600, min_frequency=2)


@pytest.fixture(scope="module")
def vocab(merges):
    return Vocab.from_merges(merges, (EOT, PAD))


@pytest.fixture(scope="module")
def tok(vocab):
    return Tokenizer(vocab)


def tiktoken_split_oracle(enc, text: str, vocab: Vocab, **kw) -> list[int]:
    """tiktoken decides where the special tokens are; each text piece between them is encoded
    by the reference (tiktoken's merge-order BPE gives other ids than greedy longest match)."""
    specials = set(vocab.special_token_ids.values())
    out, piece = [], []
    for t in enc.encode(text, **kw) + [-1]:
        if t in specials or t == -1:
            if piece:
                out += reference.encode(enc.decode_bytes(piece), vocab.merges)
                piece = []
            if t != -1:
                out.append(t)
        else:
            piece.append(t)
    return out


# ------------------------------------------------------------------------------------------------
# Tokenizer: tiktoken's names and semantics
# ------------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_special_tokens_follow_tiktoken(tok, vocab):
    enc = tiktoken_encoding(vocab)
    for text in SPECIAL_TEXTS:
        plain = reference.encode(text, vocab.merges)
        # Default: the spelling is text (DESIGN.md §1) — tiktoken's encode_ordinary.
        assert tok.encode(text) == tok.encode_ordinary(text) == plain
        assert not set(plain) & set(vocab.special_token_ids.values())
        for allowed in ("all", {EOT}, {PAD}, set()):
            want = tiktoken_split_oracle(enc, text, vocab, allowed_special=allowed,
                                         disallowed_special=())
            assert tok.encode(text, allowed_special=allowed) == want, (text, allowed)
            assert tok.encode(text.encode(), allowed_special=allowed) == want  # bytes too
        # disallowed_special="all" (tiktoken's default) raises exactly where tiktoken does
        for allowed in (set(), {EOT}):
            try:
                enc.encode(text, allowed_special=allowed, disallowed_special="all")
                tik_raises = False
            except ValueError:
                tik_raises = True
            if tik_raises:
                with pytest.raises(InputError, match="disallowed_special"):
                    tok.encode(text, allowed_special=allowed, disallowed_special="all")
            else:
                assert tok.encode(text, allowed_special=allowed, disallowed_special="all") == (
                    tiktoken_split_oracle(enc, text, vocab, allowed_special=allowed))


@pytest.mark.gpu
def test_special_tokens_in_merge_order_mode_equal_tiktoken(vocab):
    """mode="bpe" gives tiktoken's ids, so the special-token options compare id for id."""
    enc = tiktoken_encoding(vocab)
    bpe = Tokenizer(vocab, mode="bpe")
    for text in SPECIAL_TEXTS:
        for allowed in ("all", {EOT}, set()):
            assert bpe.encode(text, allowed_special=allowed) == enc.encode(
                text, allowed_special=allowed, disallowed_special=()), (text, allowed)
        assert bpe.encode_ordinary(text) == enc.encode_ordinary(text)
    assert bpe.encode_batch(SPECIAL_TEXTS, allowed_special="all").tolist() == (
        enc.encode_batch(SPECIAL_TEXTS, allowed_special="all"))


@pytest.mark.gpu
def test_special_token_errors_are_named(tok):
    with pytest.raises(InputError, match="<|nope|>.*not special tokens"):
        tok.encode("x", allowed_special={"<|nope|>"})
    with pytest.raises(InputError, match="'all' or a set"):
        tok.encode("x", allowed_special=EOT)  # a str, not a set
    with pytest.raises(InputError, match=r"document 1 contains the special token .*at character 2"):
        tok.encode_batch(["ok", f"ab{PAD}"], disallowed_special={PAD})


@pytest.mark.gpu
def test_encode_batch_takes_the_same_options(tok, vocab):
    docs = SPECIAL_TEXTS + [b"raw \xff bytes " + EOT.encode(), "", b""]
    for kw in ({}, {"allowed_special": "all"}, {"allowed_special": {PAD}}):
        be = tok.encode_batch(docs, **kw)
        assert isinstance(be, BatchEncoding) and len(be) == len(docs)
        assert be.tolist() == [tok.encode(d, **kw) for d in docs]
        assert be.ids.dtype == tok.id_dtype and be.offsets[-1] == len(be.ids)
    assert tok.encode_ordinary_batch(docs).tolist() == [reference.encode(d, vocab.merges)
                                                        for d in docs]
    with pytest.raises(InputError, match="document 1"):
        tok.encode_batch(["a", 5], allowed_special="all")


@pytest.mark.gpu
def test_decode_accepts_lists_arrays_and_tensors(tok, vocab):
    text = f"yakınlık ve{EOT} 2026 yılı"
    ids = tok.encode(text, allowed_special="all")
    assert vocab.token_to_id(EOT) in ids
    for form in (ids, tuple(ids), np.array(ids), np.array(ids, np.uint16),
                 np.array(ids, np.int32), torch.tensor(ids), torch.tensor(ids, dtype=torch.int32),
                 torch.tensor(ids)[None, :][0]):
        assert tok.decode(form) == text, type(form)
        assert tok.decode_bytes(form) == text.encode()
    with pytest.raises(InputError, match="decode_batch"):
        tok.decode(torch.tensor([ids, ids]))
    with pytest.raises(TypeError, match="position 0"):
        tok.decode(torch.tensor([1.5]))
    with pytest.raises(ValueError, match="position 1"):
        tok.decode(torch.tensor([1, tok.n_vocab]))
    be = tok.encode_batch([text, "", "ab"], allowed_special="all")
    want = [text, "", "ab"]
    assert tok.decode_batch(be) == want
    assert tok.decode_batch(be.tolist()) == want
    assert tok.decode_batch(torch.tensor([ids, ids])) == [text, text]
    assert tok.decode_batch(np.array([ids])) == [text]
    assert tok.decode_bytes_batch(be) == [w.encode() for w in want]


def test_encoder_module_does_not_import_torch():
    code = ("import sys; from torch_gpubpe import Vocab; from torch_gpubpe.encoding.tokenizer import "
            "Tokenizer; t = Tokenizer(Vocab(((97, 98),))); assert t.decode([256, 99]) == 'abc'; "
            "import numpy as np; assert t.decode(np.array([256])) == 'ab'; "
            "assert 'torch' not in sys.modules, 'torch imported'; print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=subprocess_env())
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_tiktoken_attributes(vocab):
    t = Tokenizer(vocab)  # none of these opens the GPU
    enc = tiktoken_encoding(vocab)
    assert t.n_vocab == enc.n_vocab == len(vocab) == vocab.n_vocab
    assert t.max_token_value == enc.max_token_value == len(vocab) - 1
    assert t.eot_token == enc.eot_token == vocab.token_to_id(EOT)
    assert t.special_tokens_set == enc.special_tokens_set == {EOT, PAD}
    for i in [0, 32, 255, 256, vocab.num_ordinary_tokens - 1, t.eot_token, t.eot_token + 1]:
        assert t.decode_single_token_bytes(i) == enc.decode_single_token_bytes(i)
    assert t.decode_tokens_bytes([104, 105]) == [b"h", b"i"]
    with pytest.raises(ValueError, match="outside the vocab"):
        t.decode_single_token_bytes(len(vocab))
    with pytest.raises(TypeError):
        t.decode_single_token_bytes("a")
    with pytest.raises(KeyError, match="endoftext"):
        Tokenizer(Vocab.from_merges(vocab.merges[:3])).eot_token


def test_tokenizer_from_vocab_path(tmp_path, vocab):
    vocab.save(tmp_path / "vocab.json")
    assert Tokenizer(tmp_path).vocab == vocab == Tokenizer(str(tmp_path / "vocab.json")).vocab
    with pytest.raises(TypeError, match="Vocab or the path"):
        Tokenizer(123)


# ------------------------------------------------------------------------------------------------
# Vocab: one lookup for any token; sizes with unambiguous names
# ------------------------------------------------------------------------------------------------
def test_token_to_id_for_any_token(vocab):
    smallest: dict[bytes, int] = {}
    for i, tb in enumerate(vocab.token_bytes):
        smallest.setdefault(tb, i)
    for tb, i in smallest.items():
        assert vocab.token_to_id(tb) == i
        try:
            s = tb.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if s not in vocab.special_tokens:
            assert vocab.token_to_id(s) == i
    for name, sid in vocab.special_token_ids.items():
        assert vocab.token_to_id(name) == sid == vocab.token_to_id(name.encode())
        assert vocab.id_to_bytes(sid) == name.encode()
    with pytest.raises(KeyError, match="no token of this vocab"):
        vocab.token_to_id("<|nope|>")
    with pytest.raises(KeyError):
        vocab.token_to_id(b"\xff\xfe\xfd\xfc")
    with pytest.raises(TypeError):
        vocab.token_to_id(5)
    table = vocab.get_vocab()
    assert len(table) == len(smallest) + len(vocab.special_tokens)
    assert all(vocab.token_to_id(k) == v for k, v in table.items())
    # Duplicate spellings: the smallest id, the one encode() emits (reference.encode).
    dup = Vocab.from_merges([(97, 97), (256, 97), (97, 256)])
    assert dup.token_to_id("aaa") == 257 == reference.encode("aaa", dup.merges)[0]


def test_size_names(vocab, tmp_path):
    n_special = len(vocab.special_tokens)
    assert len(vocab) == vocab.n_vocab == vocab.vocab_size == 256 + len(vocab.merges) + n_special
    assert vocab.num_ordinary_tokens == vocab.num_tokens == 256 + len(vocab.merges)
    assert min(vocab.special_token_ids.values()) == vocab.num_ordinary_tokens
    assert vocab.to_dict()["vocab_size"] == vocab.vocab_size
    # Hugging Face's names: len(tok) counts every id, tok.vocab_size leaves the added ones out.
    from transformers import AutoTokenizer

    export_all(vocab, tmp_path)
    hf = AutoTokenizer.from_pretrained(str(tmp_path))
    assert len(hf) == vocab.n_vocab and hf.vocab_size == vocab.num_ordinary_tokens


# ------------------------------------------------------------------------------------------------
# train(): empty corpus refused, progress bar
# ------------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("count_on", ["gpu", "cpu"])
def test_train_refuses_an_empty_corpus(count_on):
    from torch_gpubpe.training.trainer import train

    for docs in ([], [""], ["", b"", ""], (d for d in ["", ""])):
        with pytest.raises(InputError, match="empty corpus"):
            train(docs, 300, count_on=count_on)


@pytest.mark.gpu
def test_train_progress_true_shows_tqdm_bars(capsys, tmp_path):
    from torch_gpubpe.io.readers import open_source
    from torch_gpubpe.training.trainer import train

    docs = corpus_docs("tr_ud_boun", 30_000)
    want = reference.train(docs, 400)
    vocab = train(docs, 400, progress=True)
    assert list(vocab.merges) == want
    err = capsys.readouterr().err
    assert "count words" in err and f"{len(docs)}/{len(docs)}" in err
    assert "merge" in err and f"{400 - 256}/{400 - 256}" in err
    vocab = train(docs, 300, progress=False)  # False/None: no bar
    assert capsys.readouterr().err == ""
    # a reader's packed batches (the CLI's fast path) keep that path and count documents too
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
    reader = open_source(str(path))
    assert hasattr(reader, "packed_batches")
    assert list(train(reader, 400, progress=True).merges) == want
    assert f"count words: {len(docs)}doc" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------
# TokenizedDataset takes a vocab path as the CLI does
# ------------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_dataset_takes_a_vocab_path(tmp_path, vocab):
    from torch_gpubpe.integrations.torch_data import TokenizedDataset

    export_all(vocab, tmp_path / "out")  # what `train --out` writes
    docs = ["yakınlık ve", "2026 yılı", ""]
    want = [reference.encode(d, vocab.merges) for d in docs]
    for path in (tmp_path / "out", str(tmp_path / "out"), str(tmp_path / "out" / "vocab.json")):
        ds = TokenizedDataset(docs, path)
        assert ds.vocab == vocab and [t.tolist() for t in ds] == want
    with pytest.raises(InputError, match="no such vocab file"):
        TokenizedDataset(docs, str(tmp_path / "missing"))


# ------------------------------------------------------------------------------------------------
# Exported tokenizer_config.json: our ids out of the box in transformers
# ------------------------------------------------------------------------------------------------
def test_autotokenizer_gives_our_ids_for_special_spellings(tmp_path, vocab):
    """A special token's spelling in text gives its id, as in GPT-2's HF tokenizer (and
    ``allowed_special="all"`` here)."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    export_all(vocab, tmp_path)
    assert "split_special_tokens" not in json.loads(
        (tmp_path / "tokenizer_config.json").read_text())
    texts = SPECIAL_TEXTS + corpus_docs(CORPUS_NAMES[0], 3_000)
    tok = Tokenizer(vocab)
    want = [tok.encode(t, allowed_special="all") for t in texts]
    assert any(vocab.token_to_id(EOT) in w for w in want)
    for cls in (AutoTokenizer, PreTrainedTokenizerFast):
        hf = cls.from_pretrained(str(tmp_path))
        assert [hf(t)["input_ids"] for t in texts] == want, cls.__name__
        assert hf(texts)["input_ids"] == want
        assert hf.eos_token_id == vocab.token_to_id(EOT)
        assert hf.decode(want[0]) == texts[0]


# ------------------------------------------------------------------------------------------------
# --dataset without network: fail fast, say the right thing
# ------------------------------------------------------------------------------------------------
class _Silent:
    """A local TCP port that accepts connections and never answers (packets dropped)."""

    def __enter__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        return self

    def __exit__(self, *exc):
        self.sock.close()


def _closed_port_url() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


def test_check_reachable_is_bounded():
    from torch_gpubpe.io.hub import check_reachable

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):  # noqa: N802 - http.server's name
            self.send_response(404)
            self.end_headers()

        def log_message(self, *a):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), NotFound)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        assert check_reachable(f"http://127.0.0.1:{srv.server_port}", timeout=5) is None
    finally:
        srv.shutdown()
        srv.server_close()
    assert "Refused" in check_reachable(_closed_port_url(), timeout=5)
    with _Silent() as s:
        t0 = time.perf_counter()
        reason = check_reachable(s.url, timeout=1.0)
        assert reason is not None and time.perf_counter() - t0 < 3


def _cli_dataset(tmp_path, **env):
    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "torch_gpubpe", "train", "--dataset", "no-such-user/no-such-set",
         "--no-progress"], cwd=tmp_path, env=subprocess_env(**env), capture_output=True,
        text=True, timeout=120)
    return r, time.perf_counter() - t0


@pytest.mark.parametrize("kind", ["silent", "refused"])
def test_cli_dataset_without_network_fails_fast(tmp_path, kind):
    """Before: 24 s of retries (connection refused), minutes (packets dropped)."""
    if kind == "silent":
        with _Silent() as s:
            r, secs = _cli_dataset(tmp_path, HF_ENDPOINT=s.url)
    else:
        r, secs = _cli_dataset(tmp_path, HF_ENDPOINT=_closed_port_url())
    line = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 2 and line.startswith("torch_gpubpe: error:"), r.stderr[-2000:]
    assert "cannot be reached" in line and "127.0.0.1" in line and "--data-files" in line
    assert "HF_HUB_OFFLINE" not in line
    assert "reading no-such-user/no-such-set from the local cache only" in r.stderr  # warned
    assert secs < 20, secs  # python start + imports + a 3 s check


def test_cli_dataset_offline_mode_says_it_is_set(tmp_path):
    r, _ = _cli_dataset(tmp_path, HF_HUB_OFFLINE="1", HF_ENDPOINT=_closed_port_url())
    line = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 2 and "no-such-user/no-such-set" in line
    assert "offline mode is on (HF_HUB_OFFLINE is set)" in line and "Unset HF_HUB_OFFLINE" in line
    assert "set HF_HUB_OFFLINE=1" not in line and "--data-files" in line
