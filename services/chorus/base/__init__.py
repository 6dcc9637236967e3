"""What every part of Chorus stands on: time, errors, log context, metrics, trace context,
settings, the database pool and migrations, fault points, the hop trace, and what Python
3.11 added that Chorus uses, for 3.10 too (``compat``). No record path here (that is
``chorus.kernel``), and nothing that imports anything else of Chorus."""
