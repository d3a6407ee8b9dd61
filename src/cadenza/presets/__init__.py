"""Model and training presets, one TOML file per size (read with `cadenza.config.load_preset`)."""
