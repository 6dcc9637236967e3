"""What every part of Chorus stands on: time, errors, log context, metrics, trace context,
settings, the database pool and migrations, fault points and the hop trace. No record path
here (that is ``chorus.kernel``), and nothing that imports anything else of Chorus."""
