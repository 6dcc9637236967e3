"""The kernel's steps of the record path; the order they run in is ``chorus.kernel.recordpath``."""
