"""Training on the GPU: the API, the memory budget, word counting (GPU/CPU), counts files, the
merge loops.

:func:`count_words` (:mod:`~torch_gpubpe.training.counting`) counts the words of documents as
training does, on the GPU or the CPU, under a memory budget.
"""

from torch_gpubpe.training.counting import count_words
from torch_gpubpe.training.word_counts import WordCounts

__all__ = ["WordCounts", "count_words"]
