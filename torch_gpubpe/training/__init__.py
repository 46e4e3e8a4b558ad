"""Training on the GPU: the API, the memory budget, word counting (GPU/CPU), counts files, the merge loops."""
