"""make bench: what adoption, rollout and render cost, against the floor. See bench/run.py."""
