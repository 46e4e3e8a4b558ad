"""Sizes and buffer layouts shared by the encoder's session (:mod:`.session`), its batch slots
(:mod:`.slot`) and the long-word passes (:mod:`.long_words`): workgroup size, per-dispatch and
per-slice bounds (DESIGN.md §6, §8), and the layout of a slot's metadata readback.
"""

from __future__ import annotations

from torch_gpubpe.core.trie import NO_TOKEN as NO_TOKEN  # (the encoder modules import it here)

# Threads per workgroup of every encoder and pre-tokenizer pipeline, passed to the shaders as
# their ``WG`` override (their default is the same).
WG = 256
DEFAULT_CHUNK = 32
DEFAULT_BUDGET = 1 << 15  # walk steps per thread per dispatch (lavapipe stops loops at 65,535)
MAX_CONTINUATIONS_PER_SUBMIT = 64
DEFAULT_LONG_WORD = 2048  # a walk this many bytes past its chunk hands the word to the long path
MAX_LONG_TILE = 16384  # bytes per long-word tile (>= the longest token; lavapipe's loop cap)
# A call above two groups is cut into groups of whole documents of about this size, two in
# flight; smaller groups made calls of 50-250 MB a third slower (docs/PERFORMANCE.md).
GROUP_BYTES = 128 << 20
MAX_SLICE_POSITIONS = 1 << 31  # byte positions of a slice stay far below 2^32 (u32 in WGSL)
HOST_STEPS = ("wait_upload_map", "upload_copy", "upload_doc_starts", "record",
              "previous_readback_submit", "wait_token_count", "submit", "wait_ids", "ids_copy")
"""The steps of :attr:`Tokenizer.host_seconds` (host seconds per step of a batch)."""
# Slots of the encoder's ``info`` counters, named as in wgsl/common.wgsl (INFO_*; the test of
# the shaders checks that they agree).
INFO_TOKENS = 0
INFO_UNFINISHED = 1
INFO_CONT_LO = 2
INFO_CONT_HI = 3
INFO_REGIONS = 4
INFO_LONG_ERRORS = 5
INFO_BAD_TOKENS = 6
INFO_HEAD = 8
# Layout of the metadata readback (rb_meta): info[0:INFO_HEAD], pass timestamps (3 walk passes, then 3
# of a regex pre-tokenizer), the first regions (first byte, end byte) of info[8:], then each
# document's first-token index.
META_HEAD = 4 * INFO_HEAD
TS_OFF = 32
TS_COUNT = 12
REG_OFF = TS_OFF + 8 * TS_COUNT
REG_INLINE = 256
DOC_OFF = REG_OFF + 8 * REG_INLINE
