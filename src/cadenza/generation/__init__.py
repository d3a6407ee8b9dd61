"""New music from a checkpoint: sampling filters, the decoding loop, `SamplingConfig`, `generate()`."""
