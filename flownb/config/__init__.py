"""Settings (the one reader of the environment), endpoints (flownb.toml) and prices."""
