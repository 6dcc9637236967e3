"""The reliability suite: real workflows through real services while faults are injected.

Jepsen's and DBOS's method: start Kafka, PostgreSQL and every Chorus service as
separate OS processes, drive both reference workflows through the gateway, inject
faults (SIGKILL at named points, broker and database restarts, duplicate delivery,
poison records, rebalances, timers falling due while the timer service is down, a
paused replica), then check invariants over everything that happened.

- ``infra``       Kafka and PostgreSQL (the shared local ones or private ones to break)
- ``deployment``  one isolated Chorus deployment: topics, database, processes, replicas
- ``driver``      submits workflows through the gateway and approves them like reviewers
- ``observe``     reads topics and consumer-group progress
- ``injectors``   the faults
- ``reconciler``  the invariants, checked after each scenario
- ``scenarios``   what the short suite (``make test``) and the full suite run
- ``report``      markdown + JSON per run under .local/reliability-results/<timestamp>/

``python -m tests.reliability`` runs the full suite (``make test-reliability``);
``test_short_suite.py`` is the short one, collected by ``make test``.
"""
