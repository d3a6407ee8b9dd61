"""Model and training presets, one TOML file per size (read with `cadenza.training.config.load_preset`)."""
