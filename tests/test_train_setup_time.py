"""The merge phase's set-up and time breakdown (where a fresh run's seconds go).

* the word list's links and byte lists, built on the GPU (wl_links, wl_list_offsets,
  wl_byte_lists), equal the host's construction: nxt/prv exactly, each byte's list as a set of
  stream positions (its order is free), the lists' offsets and lengths;
* train()'s ``stats`` time breakdown: every part present, non-negative, and the main thread's
  parts adding up to at most the total;
* a fresh process's train(list[str]) imports neither pandas nor pyarrow.acero (0.3-0.5 s of its
  counting on the H200), its merges equal the reference's.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import corpus_docs
from torch_gpubpe.core import reference
from torch_gpubpe.training.merge_loop import MergeLoop
from torch_gpubpe.training.trainer import get_trainer, train


def _stream(words: list[bytes], tws: int):
    lens = np.array([len(w) for w in words], np.int64)
    data = np.frombuffer(b"".join(words), np.uint8)
    starts = np.zeros(len(lens), np.int64)
    np.cumsum(lens[:-1], out=starts[1:])
    sym = data.astype(np.uint32)
    sym[starts] |= np.uint32(tws)
    wid = np.repeat(np.arange(len(lens), dtype=np.uint32), lens)
    return data, sym, wid, starts, lens


@pytest.mark.parametrize("corpus,limit", [("multi_udhr", 60_000), ("code_cpython_stdlib", 30_000)])
def test_gpu_built_links_and_byte_lists_equal_the_host_construction(corpus, limit):
    counts = reference.count_words(corpus_docs(corpus, limit))
    words = [w for w in counts if len(w) > 1]
    tr = get_trainer()
    c = tr.info["wordlist"].consts
    data, sym, wid, starts, lens = _stream(words, c["TWS"])
    n = len(sym)
    wts = np.array([counts[w] for w in words], np.uint64).view(np.uint32)
    loop = MergeLoop(tr, "wordlist", False, sym, wid, starts, lens, wts, 10, 1, 512, 64, {},
                      False, None)
    loop._count(0, n, setup=True)
    g, own = tr.gpu, loop.k.own
    nxt = g.read_u32(own["nxt"], 0, n)
    prv = g.read_u32(own["prv"], 0, n)
    tlist = g.read_u32(own["tlist"], 0, 512).reshape(256, 2)
    pool = g.read_u32(own["pool"], 0, n)
    ends = starts + lens - 1
    want_nxt = np.arange(1, n + 1, dtype=np.uint32)
    want_nxt[ends] = c["NONE"]
    want_prv = (np.arange(n, dtype=np.int64) - 1).astype(np.uint32)
    want_prv[starts] = c["NONE"]
    assert np.array_equal(nxt, want_nxt)
    assert np.array_equal(prv, want_prv)
    hist = np.bincount(data, minlength=256).astype(np.uint32)
    assert np.array_equal(tlist[:, 1], hist)
    assert np.array_equal(tlist[:, 0], np.concatenate([[0], np.cumsum(hist)[:-1]]).astype(
        np.uint32))
    for b in np.flatnonzero(hist):
        got = np.sort(pool[tlist[b, 0]:tlist[b, 0] + tlist[b, 1]])
        assert np.array_equal(got, np.flatnonzero(data == b).astype(np.uint32)), b


def test_stats_time_breakdown_adds_up():
    docs = corpus_docs("en_novels", 300_000)
    for _ in range(2):       # the first opens the device in this process (or found it open)
        st: dict = {}
        train(docs, 600, stats=st)
        main = [st[k] for k in ("seconds_count", "seconds_gpu_init_wait",
                                "seconds_compile_wait", "seconds_prepare", "seconds_upload",
                                "seconds_merge")]
        assert min(main) >= 0
        assert sum(main) <= st["seconds_total"]
        assert 0 <= st["seconds_prefetch"] <= st["seconds_count"]
        assert st["prefetch_bytes"] > 0
        assert st["seconds_upload_host"] + st["seconds_upload_gpu"] <= st["seconds_upload"]
        assert 0 <= st.get("seconds_rebuilds", 0.0) <= st["seconds_merge"]
        for k in ("seconds_gpu_open", "seconds_compile_count", "seconds_compile_train",
                  "seconds_import_arrow"):
            assert st[k] >= 0


def test_fresh_train_of_strings_imports_neither_pandas_nor_acero():
    """train(list[str]) in a fresh process, with words longer than the GPU table takes (they
    are grouped on the host, by Arrow), imports neither pandas nor pyarrow.acero: on the H200
    those imports cost 0.3-0.5 s of a fresh run's counting (Table.group_by, Array.to_numpy and
    pa.array(ndarray) all import pandas). The merges equal the reference's."""
    import json
    import subprocess
    import sys

    from torch_gpubpe.training.wordcount import MAXW

    make_docs = (f"long_word = 'x' * {3 * MAXW} + 'y' * 7\n"
                 "docs = [f'alpha beta {long_word} gamma {i % 7} ' * 3 for i in range(200)]\n")
    namespace: dict = {}
    exec(make_docs, namespace)
    docs = namespace["docs"]
    code = (
        "import json, sys\n"
        "from torch_gpubpe.training.trainer import train\n"
        + make_docs +
        "st = {}\n"
        "v = train(docs, 300, min_frequency=1, stats=st)\n"
        "print(json.dumps({'merges': [list(m) for m in v.merges],\n"
        "                  'pandas': 'pandas' in sys.modules,\n"
        "                  'acero': 'pyarrow.acero' in sys.modules}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert not got["pandas"] and not got["acero"], got
    assert [tuple(m) for m in got["merges"]] == reference.train(docs, 300, min_frequency=1)


def test_64_bit_count_variant_compiled_only_once_the_bytes_counted_can_need_it(monkeypatch):
    """The opening thread compiles the 64-bit count variant only once the bytes counted reach
    2^31 (a word has fewer pairs than bytes), and not on a CPU adapter (whose cores count);
    train() on a smaller corpus asks for no 64-bit pipeline at all."""
    from torch_gpubpe.training import api
    from torch_gpubpe.training.gpu_trainer import WIDE_PAIRS, GPUTrainer

    class Trainer:
        too_many_buffers: dict = {}

        def __init__(self, is_cpu):
            self.is_cpu, self.compiled = is_cpu, []

        def pipelines(self, algorithm, wide, profile=False):
            self.compiled.append((algorithm, wide))

    for is_cpu, counted_bytes, want in ((False, 0, []), (False, WIDE_PAIRS - 1, []),
                                        (False, WIDE_PAIRS, [("wordlist", True)]),
                                        (True, WIDE_PAIRS, [])):
        opener, tr = api._Opener(count_on_gpu=True), Trainer(is_cpu)
        opener.counted.set()          # counting has ended with these bytes
        opener.compile_wide(tr, {"corpus_bytes": counted_bytes})
        assert tr.compiled == want, (is_cpu, counted_bytes)
        assert ("seconds_compile_wide" in opener.times) == bool(want)

    asked = []
    pipelines = GPUTrainer.pipelines

    def recording(self, algorithm, wide, profile=False):
        asked.append((algorithm, wide))
        return pipelines(self, algorithm, wide, profile)

    monkeypatch.setattr(GPUTrainer, "pipelines", recording)
    docs = corpus_docs("en_novels", 200_000)
    st: dict = {}
    vocab = train(docs, 400, min_frequency=1, stats=st)
    assert ("wordlist", False) in asked and ("wordlist", True) not in asked, asked
    assert st["corpus_bytes"] < WIDE_PAIRS and "seconds_compile_wide" not in st
    assert list(vocab.merges) == reference.train(docs, 400, min_frequency=1)


def test_trainer_pipelines_compiled_once_when_asked_from_two_threads(monkeypatch):
    """GPUTrainer.pipelines asked for the same variant by two threads at once (train()'s
    opening thread compiling the 64-bit variant while a run asks for it) compiles it once;
    both get the same pipelines."""
    import threading
    import time

    from torch_gpubpe.gpu.device import get_gpu
    from torch_gpubpe.training import gpu_trainer, pair_table

    tr = gpu_trainer.GPUTrainer(get_gpu())
    calls = []
    compile_pipelines = pair_table.compile_pipelines

    def slow(*a, **kw):
        calls.append(threading.current_thread().name)
        time.sleep(0.3)     # both threads are asking while the first compiles
        return compile_pipelines(*a, **kw)

    monkeypatch.setattr(pair_table, "compile_pipelines", slow)
    got = [None, None]

    def ask(i):
        got[i] = tr.pipelines("wordlist", wide=True)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(calls) == 1, calls
    assert got[0] is got[1] and got[0]
