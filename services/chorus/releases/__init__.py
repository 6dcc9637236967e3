"""Versioned rollouts: releases of a service side by side, workflows pinned to the release
that started them, moves between releases, and the reports the rollout service reads."""
