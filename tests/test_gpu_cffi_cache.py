"""torch_gpubpe.gpu.wgpu_internals.cached_header_parse: cffi's parse of wgpu-py's header restored from the disk cache is
the parse itself (same declarations, constants, and C types of the same sizes and fields), and
the GPU opens and encodes with it in a fresh process."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import subprocess_env
from torch_gpubpe.gpu import wgpu_internals as _wgpu_internals


def _fresh_ffi(header: str):
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(header)
    return ffi


def _described(ffi) -> dict:
    import cffi

    decls = {k: (tp._get_c_name() if hasattr(tp, "_get_c_name") else repr(tp), q)
             for k, (tp, q) in ffi._parser._declarations.items()}
    sizes = {}  # C types built from the declarations (every 16th: cffi parses each ~50 ms)
    for k in sorted(decls)[::16]:
        if k.startswith(("struct ", "typedef ")):
            name = k.split(" ", 1)[1]
            try:
                t = ffi.typeof(name)
                fields = t.fields if t.kind == "struct" else None
                sizes[k] = (ffi.sizeof(t), [(f, x.offset, x.type.cname) for f, x in fields]
                            if fields else None)
            except (cffi.CDefError, cffi.FFIError, TypeError, ValueError) as e:  # opaque
                sizes[k] = type(e).__name__
    return {"decls": decls, "ints": dict(ffi._parser._int_constants), "sizes": sizes}


def test_cached_parse_equals_the_parse(tmp_path, monkeypatch):
    from wgpu.backends.wgpu_native._ffi import get_wgpu_header

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for v in ("TORCH_GPUBPE_NO_CACHE", "TORCH_GPUBPE_NO_CFFI_CACHE", "TORCH_GPUBPE_NO_TABLE_CACHE"):
        monkeypatch.delenv(v, raising=False)
    header = get_wgpu_header()
    want = _described(_fresh_ffi(header))
    before = dict(_wgpu_internals.cffi_cache_stats, errors=list(_wgpu_internals.cffi_cache_stats["errors"]))
    with _wgpu_internals.cached_header_parse():
        first = _fresh_ffi(header)  # parsed and saved
    with _wgpu_internals.cached_header_parse():
        again = _fresh_ffi(header)  # restored
    assert _wgpu_internals.cffi_cache_stats["parsed"] == before["parsed"] + 1
    assert _wgpu_internals.cffi_cache_stats["saved"] == before["saved"] + 1
    assert _wgpu_internals.cffi_cache_stats["loaded"] == before["loaded"] + 1
    assert _wgpu_internals.cffi_cache_stats["errors"] == before["errors"]
    assert len(list((tmp_path / "torch_gpubpe").glob("cffi-*.pickle"))) == 1
    assert _described(first) == want and _described(again) == want
    assert len(want["decls"]) > 400 and want["ints"]
    assert sum(isinstance(v, tuple) and v[1] is not None for v in want["sizes"].values()) >= 10
    # a damaged file: parsed again (and rewritten), same result
    (f,) = (tmp_path / "torch_gpubpe").glob("cffi-*.pickle")
    f.write_bytes(b"not a pickle")
    with pytest.warns(RuntimeWarning, match="cffi header cache"):
        with _wgpu_internals.cached_header_parse():
            assert _described(_fresh_ffi(header)) == want
    assert _wgpu_internals.cffi_cache_stats["errors"][-1].startswith("UnpicklingError")
    assert "cffi header cache" in _wgpu_internals.fallbacks()
    _wgpu_internals.reset_fallbacks()


@pytest.mark.gpu
def test_fresh_processes_encode_with_the_cache(tmp_path):
    code = ("from torch_gpubpe import Vocab, _wgpu_internals, reference\n"
            "from torch_gpubpe.encoding.tokenizer import Tokenizer\n"
            "docs = ['hello world', 'a b a b', 'çok güzel 123']\n"
            "v = Vocab.from_merges(reference.train(docs, 270))\n"
            "ids = Tokenizer(v).encode_batch(docs).tolist()\n"
            "assert ids == [reference.encode(d, v.merges) for d in docs], ids\n"
            "s = _wgpu_internals.cffi_cache_stats\n"
            "print(s['loaded'], s['parsed'], s['saved'], s['errors'])\n")
    env = subprocess_env(XDG_CACHE_HOME=str(tmp_path))
    for v in ("TORCH_GPUBPE_NO_CACHE", "TORCH_GPUBPE_NO_CFFI_CACHE", "TORCH_GPUBPE_NO_TABLE_CACHE"):
        env.pop(v, None)
    out = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=300) for _ in range(2)]
    assert all(r.returncode == 0 for r in out), [r.stderr for r in out]
    assert out[0].stdout.split() == ["0", "1", "1", "[]"]  # parsed, saved
    assert out[1].stdout.split() == ["1", "0", "0", "[]"]  # restored

