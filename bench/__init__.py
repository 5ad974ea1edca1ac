"""flownb benchmarks. Each prints ratios against a reference measured in the same run:
absolute times on a shared 2-core machine mean little, ratios do. ``python -m bench`` runs all."""
