"""Documents in and tokens out: readers, sources, shard writers, Hub access."""
