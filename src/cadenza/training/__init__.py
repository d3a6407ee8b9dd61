"""Training: run configs and presets, the training loop, its logs and TensorBoard previews."""
