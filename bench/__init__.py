"""make bench: what adoption, rollout and render cost, against the floor (issue 9). See bench/run.py."""
