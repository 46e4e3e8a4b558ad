"""Encoding on the GPU: the Tokenizer, its GPU session, greedy and merge-order walks, pre-tokenizers, the streaming encode."""
