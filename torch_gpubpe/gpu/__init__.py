"""The WebGPU device: adapter choice, the device, shader loading, the one module of wgpu internals."""
