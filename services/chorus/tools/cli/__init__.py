"""The ``chorus`` command-line tool."""
