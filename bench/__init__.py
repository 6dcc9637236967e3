"""Chorus benchmarks: every measurement side by side with its baseline, in one run (issue 9)."""
