"""Pure-Python building blocks: no wgpu, no torch (the oracle, vocabularies and their file formats, patterns, trie, merge-order tables, packing, the native str packer, the disk cache)."""
